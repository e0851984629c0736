"""Quota configs: validation of `quota_config` records, the config store and entity resolution.

This is the *policy* half of Kafka's quota code (DefaultQuotaCallback, ClientQuotaControlManager
validation, ConnectionQuotas' limit lookup); the accounting half is in `stats`. The admin CLI
validates with the same `parse_config_record` the engine applies, so what the tool accepts is
exactly what the workers enforce.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from typing import Any, Mapping

from app.engine.brief import brief
from app.engine.kafka_math import INT_MAX, INT_MAX_F, LONG_MAX, UNLIMITED
from app.engine.pickling import by_constructor

DEFAULT = "<default>"

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
MUTATION = "controller_mutation_rate"
IP_RATE = "connection_creation_rate"
BROKER_RATE = "max_connection_creation_rate"

CLIENT_QUOTAS = (PRODUCE, FETCH, REQUEST, MUTATION)
#: Principals whose resolution is cached at most; beyond it the cache starts afresh. A cache,
#: not state: its size bounds memory at a million principals (each entry is ~700 bytes), and a
#: principal resolved again costs a few µs once per cache cycle.
MAX_RESOLVED = 131_072
#: Kafka's config types: LONG and INT values must be integral (KRaft ClientQuotaControlManager).
INTEGRAL = {PRODUCE: LONG_MAX, FETCH: LONG_MAX, IP_RATE: INT_MAX, BROKER_RATE: INT_MAX}
MAX_NAME = 1024

# quotaTypesEnabled bits (ClientQuotaManager.QuotaTypes)
CLIENT_ID_LEVEL = 1
USER_LEVEL = 2
USER_CLIENT_LEVEL = 4


class ConfigError(ValueError):
    """A quota config Kafka's controller would reject; the message is one line for the user."""


@dataclass(frozen=True)
class ConfigUpdate:
    """One validated `quota_config` record: an entity and the quotas it sets (None removes)."""

    kind: str  # "client" | "ip" | "broker"
    entity: tuple[Any, ...]  # client: (user|None, client|None); ip: (ip,); broker: (broker, listener|None)
    quotas: Mapping[str, float | None]
    ts: int = 0

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return by_constructor(self)


@dataclass(frozen=True)
class Resolution:
    """Who shares a window (Kafka's metric tags) and the limit that applies to it."""

    user: str
    client_id: str
    limit: float
    level: str | None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return by_constructor(self)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string")
    if value == "":
        raise ConfigError(f"empty {what} is not supported (use \"<default>\" for the default entity)")
    if len(value) > MAX_NAME:
        raise ConfigError(f"{what} is longer than {MAX_NAME} characters")
    return value


def validate_value(key: str, value: Any) -> float | None:
    """Kafka's KRaft rules: > 0, integral for LONG/INT keys, within the type's range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}: {brief(value)} is not a number")
    if value <= 0:
        raise ConfigError(f"{key}: {brief(value)} must be greater than 0")
    if key in INTEGRAL:
        if abs(value - round(value)) > 1e-6:
            raise ConfigError(f"{key}: {brief(value)} must be an integer")
        if value > INTEGRAL[key]:
            raise ConfigError(f"{key}: {brief(value)} is out of range (max {INTEGRAL[key]})")
        return float(round(value))
    return float(value)


def parse_config_record(record: Mapping[str, Any]) -> ConfigUpdate:
    """Validate a contract `quota_config` record into a `ConfigUpdate`, or raise ConfigError."""
    entity = record.get("entity")
    quotas = record.get("quotas")
    if not isinstance(entity, dict) or not entity:
        raise ConfigError("entity must be a non-empty object")
    if not isinstance(quotas, dict) or not quotas:
        raise ConfigError("quotas must be a non-empty object")
    ts = record.get("ts", 0)
    if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
        raise ConfigError("ts must be a non-negative integer (epoch ms)")
    keys = set(entity)
    ent: tuple[Any, ...]
    if "ip" in keys:
        if keys != {"ip"}:
            raise ConfigError("an ip entity cannot be combined with user, client_id or broker")
        ip = _name(entity["ip"], "ip")
        if ip != DEFAULT:
            try:
                ip = str(ipaddress.ip_address(ip))
            except ValueError:
                raise ConfigError(f"ip {brief(ip)} is not an IP address") from None
        kind, allowed, ent = "ip", {IP_RATE}, (ip,)
    elif "broker" in keys:
        if not keys <= {"broker", "listener"}:
            raise ConfigError("a broker entity takes only broker and listener")
        broker = entity["broker"]
        if broker != DEFAULT and (isinstance(broker, bool) or not isinstance(broker, int) or broker < 0):
            raise ConfigError("broker must be a broker id (integer >= 0) or \"<default>\"")
        listener = entity.get("listener")
        if listener is not None:
            listener = _name(listener, "listener")
            if listener == DEFAULT:
                raise ConfigError("listener must be a listener name")
        kind, allowed, ent = "broker", {BROKER_RATE}, (broker, listener)
    elif keys <= {"user", "client_id"}:
        user = entity.get("user")
        client = entity.get("client_id")
        ent = (
            None if user is None else _name(user, "user"),
            None if client is None else _name(client, "client_id"),
        )
        if ent == (None, None):
            raise ConfigError("entity needs a user, a client_id, an ip or a broker")
        kind, allowed = "client", set(CLIENT_QUOTAS)
    else:
        raise ConfigError(f"unknown entity keys: {', '.join(sorted(keys - {'user', 'client_id'}))}")
    parsed: dict[str, float | None] = {}
    for key, value in quotas.items():
        if key not in allowed:
            raise ConfigError(f"unknown quota {brief(key)} for a {kind} entity (allowed: {', '.join(sorted(allowed))})")
        parsed[key] = validate_value(key, value)
    return ConfigUpdate(kind, ent, parsed, ts)


def client_level_path(user: str | None, client: str | None) -> str:
    """The ZooKeeper-style path Kafka's docs use to name a config level."""
    if user is not None and client is not None:
        return f"/config/users/{user}/clients/{client}"
    if user is not None:
        return f"/config/users/{user}"
    return f"/config/clients/{client}"


def _level_bit(entity: tuple[str | None, str | None]) -> int:
    user, client = entity
    if user is not None and client is not None:
        return USER_CLIENT_LEVEL
    return USER_LEVEL if user is not None else CLIENT_ID_LEVEL


class QuotaConfigs:
    """Every quota config in force, and Kafka's resolution rules over them.

    Client quotas are kept per quota type because each Kafka quota manager has its own
    overrides and its own `quotaTypesEnabled` (here reference-counted, as in the newer Java
    ClientQuotaManager: removing the last quota of a level disables it again).
    """

    def __init__(self) -> None:
        self.client: dict[str, dict[tuple[str | None, str | None], float]] = {q: {} for q in CLIENT_QUOTAS}
        self.ip: dict[str, float] = {}
        self.broker: dict[tuple[Any, str | None], float] = {}
        self._enabled: dict[str, int] = {q: 0 for q in CLIENT_QUOTAS}
        self._cache: dict[tuple[str, str, str], Resolution | None] = {}
        #: bumped on every change, so callers can cache derived values
        self.version = 0

    def apply(self, update: ConfigUpdate) -> None:
        """Set or remove quotas in place. Windows keep their samples; only limits change."""
        if update.kind == "client":
            for key, value in update.quotas.items():
                table = self.client[key]
                if value is None:
                    table.pop(update.entity, None)
                else:
                    table[update.entity] = value
                bits = 0
                for entity in table:
                    bits |= _level_bit(entity)
                self._enabled[key] = bits
        elif update.kind == "ip":
            value = update.quotas.get(IP_RATE)
            if value is None:
                self.ip.pop(update.entity[0], None)
            else:
                self.ip[update.entity[0]] = value
        else:
            value = update.quotas.get(BROKER_RATE)
            if value is None:
                self.broker.pop(update.entity, None)
            else:
                self.broker[update.entity] = value
        self._cache.clear()
        self.version += 1

    def forget_resolutions(self) -> None:
        """Drop the cached resolutions (principals that left; they are found again on use)."""
        self._cache.clear()

    def copy(self) -> QuotaConfigs:
        """An independent copy (its own resolution cache)."""
        new = QuotaConfigs()
        new.client = {quota: dict(table) for quota, table in self.client.items()}
        new.ip = dict(self.ip)
        new.broker = dict(self.broker)
        new._enabled = dict(self._enabled)
        new.version = self.version
        return new

    def enabled(self, quota: str) -> bool:
        """Kafka's quotasEnabled: with no quota of this type anywhere, nothing is recorded."""
        return self._enabled[quota] != 0

    def entity_kinds(self, quota: str) -> frozenset[str]:
        """What the entities a quota type resolves to can be named by under these configs:
        "user" (the resolved entity has a user) and/or "client_id" (a client id alone).

        From `resolve`'s rules: a client-id level alone names client ids; levels that all
        name a user name users; a mix names users when a `<default>` user entry exists (every
        principal matches it), else either. Drivers that route by entity use it to know in
        advance whether one request's quota types can live apart.
        """
        bits = self._enabled[quota]
        if bits == 0:
            return frozenset()
        if bits == CLIENT_ID_LEVEL:
            return frozenset({"client_id"})
        if bits in (USER_LEVEL, USER_CLIENT_LEVEL):
            return frozenset({"user"})
        table = self.client[quota]
        if (DEFAULT, DEFAULT) in table or (DEFAULT, None) in table:
            return frozenset({"user"})
        return frozenset({"user", "client_id"})

    def resolve(self, quota: str, user: str, client: str) -> Resolution | None:
        """Metric tags and limit for a (user, client-id) request, or None when quotas are off.

        quotaMetricTags picks who shares the window; quotaLimit picks the limit for those tags.
        Precedence, most specific first: users/<u>/clients/<c>, users/<u>/clients/<default>,
        users/<u>, users/<default>/clients/<c>, users/<default>/clients/<default>,
        users/<default>, clients/<c>, clients/<default>; nothing matching means unlimited.
        """
        ck = (quota, user, client)
        if ck in self._cache:  # not try/except: a compiled raise builds a traceback per miss
            return self._cache[ck]
        bits = self._enabled[quota]
        if bits == 0:
            res = None
        else:
            tags = self._tags(self.client[quota], bits, user, client)
            limit, level = self._limit(self.client[quota], tags)
            res = Resolution(tags[0], tags[1], limit, level)
        if len(self._cache) >= MAX_RESOLVED:
            self._cache.clear()
        self._cache[ck] = res
        return res

    @staticmethod
    def _tags(table: Mapping[tuple[str | None, str | None], float], bits: int, user: str, client: str) -> tuple[str, str]:
        if bits == CLIENT_ID_LEVEL:
            return "", client
        if bits == USER_LEVEL:
            return user, ""
        if bits == USER_CLIENT_LEVEL:
            return user, client
        if (user, client) in table or (user, DEFAULT) in table:
            return user, client
        if (user, None) in table:
            return user, ""
        if (DEFAULT, client) in table or (DEFAULT, DEFAULT) in table:
            return user, client
        if (DEFAULT, None) in table:
            return user, ""
        return "", client

    @staticmethod
    def _limit(table: Mapping[tuple[str | None, str | None], float], tags: tuple[str, str]) -> tuple[float, str | None]:
        user, client = tags
        candidates: tuple[tuple[str | None, str | None], ...]
        if user and client:
            candidates = ((user, client), (user, DEFAULT), (DEFAULT, client), (DEFAULT, DEFAULT))
        elif user:
            candidates = ((user, None), (DEFAULT, None))
        elif client:
            candidates = ((None, client), (None, DEFAULT))
        else:
            candidates = ()
        for entity in candidates:
            value = table.get(entity)
            if value is not None:
                return value, client_level_path(*entity)
        return UNLIMITED, None

    def resolution_view(self, quota: str, entity: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The config levels Kafka checks for a window of this quota type and entity, most
        specific first, with the value set at each (None: not set): what `explain` shows."""
        if quota in CLIENT_QUOTAS:
            table = self.client[quota]
            user, client = entity.get("user", ""), entity.get("client_id", "")
            candidates: list[tuple[str | None, str | None]]
            if user and client:
                candidates = [(user, client), (user, DEFAULT), (DEFAULT, client),
                              (DEFAULT, DEFAULT)]
            elif user:
                candidates = [(user, None), (DEFAULT, None)]
            elif client:
                candidates = [(None, client), (None, DEFAULT)]
            else:
                candidates = []
            return [(client_level_path(*c), table.get(c)) for c in candidates]
        if quota == IP_RATE:
            ip = entity.get("ip")
            return [(f"/config/ips/{ip}", self.ip.get(str(ip))),
                    (f"/config/ips/{DEFAULT}", self.ip.get(DEFAULT))]
        broker, listener = entity.get("broker"), entity.get("listener")
        out: list[tuple[str, Any]] = []
        for who in (broker, DEFAULT):
            path = f"/config/brokers/{who}" + (f"/listeners/{listener}" if listener else "")
            out.append((path, self.broker.get((who, listener))))
        return out

    def ip_limit(self, ip: str) -> tuple[float, str] | None:
        """Per-IP connection_creation_rate: override, else default; None means disabled."""
        value = self.ip.get(ip)
        if value is not None:
            level = f"/config/ips/{ip}"
        else:
            value = self.ip.get(DEFAULT)
            level = f"/config/ips/{DEFAULT}"
        if value is None or value == INT_MAX_F:
            return None
        return value, level

    def broker_limit(self, broker: int, listener: str | None) -> tuple[float, str | None]:
        """max.connection.creation.rate (listener=None) or its per-listener variant.

        A broker's own config beats the cluster default; unset means Int.MaxValue, which Kafka
        still records against (so a limit set later sees the recent connections).
        """
        for who in (broker, DEFAULT):
            value = self.broker.get((who, listener))
            if value is not None:
                path = f"/config/brokers/{who}"
                return value, path if listener is None else f"{path}/listeners/{listener}"
        return INT_MAX_F, None

    def entries(self) -> list[tuple[str, dict[str, Any], str, float]]:
        """Every configured quota as (kind, entity, key, value), for `describe` and snapshots."""
        rows: list[tuple[str, dict[str, Any], str, float]] = []
        for key, table in self.client.items():
            for (user, client), value in table.items():
                entity: dict[str, Any] = {}
                if user is not None:
                    entity["user"] = user
                if client is not None:
                    entity["client_id"] = client
                rows.append(("client", entity, key, value))
        for ip, value in self.ip.items():
            rows.append(("ip", {"ip": ip}, IP_RATE, value))
        for (broker, listener), value in self.broker.items():
            entity = {"broker": broker} if listener is None else {"broker": broker, "listener": listener}
            rows.append(("broker", entity, BROKER_RATE, value))
        return rows
