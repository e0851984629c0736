"""kafka-configs arguments for quota entities, into contract `quota_config` records.

`kafka-configs` pairs each `--entity-name`/`--entity-default` with the `--entity-type` before
it, so `--entity-type users --entity-name alice --entity-type clients --entity-default` is the
entity users=alice, clients=<default>. argparse does not keep the order of different options,
so every entity option appends to one ordered list (`EntityPart`), read by `parse_entity`.
The shorthands `--user/--client/--ip/--broker NAME` and `--user-defaults/--client-defaults/
--ip-defaults/--broker-defaults` are the same as a type followed by a name or a default.

Validation of the resulting record is not done here: `build_records` hands every record to
`app.engine.configs.parse_config_record`, the same function the workers apply records with.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Sequence

from app.contract.keys import config_entity
from app.engine.configs import BROKER_RATE, DEFAULT, ConfigError, ConfigUpdate, parse_config_record
from app.errors import UserError

#: kafka-configs entity types (and the singular spellings) -> the contract's entity field.
ENTITY_TYPES = {"users": "user", "clients": "client_id", "ips": "ip", "brokers": "broker"}
_ALIASES = {"user": "users", "client": "clients", "ip": "ips", "broker": "brokers"}
#: Display names, as kafka-configs prints them.
TYPE_LABEL = {"user": "user-principal", "client_id": "client-id", "ip": "ip", "broker": "broker"}

ANY = None  # a type given without a name: every entity of that type (describe only)

_LISTENER_KEY = re.compile(r"^listener\.name\.([^.]+)\.max[._]connection[._]creation[._]rate$")
_BROKER_KEYS = {"max.connection.creation.rate", BROKER_RATE}


class EntityPart(argparse.Action):
    """Appends ("type", value) / ("name", value) / ("default", None) to `namespace.entity_parts`.

    A shorthand option (`--user alice`) appends its type first. The list is rebuilt on every
    call, so argparse's shared default is never mutated.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, part: str,
                 entity_type: str | None = None, **kwargs: Any) -> None:
        self.part = part
        self.entity_type = entity_type
        if part == "default":
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parts = list(getattr(namespace, self.dest, None) or [])
        if self.entity_type is not None:
            parts.append(("type", self.entity_type))
        parts.append((self.part, None if self.part == "default" else values))
        setattr(namespace, self.dest, parts)


def add_entity_options(p: argparse.ArgumentParser) -> None:
    """The kafka-configs entity options, all feeding `args.entity_parts` in command-line order."""
    g = p.add_argument_group("entity (as kafka-configs: each name/default applies to the type before it)")
    kw: dict[str, Any] = {"dest": "entity_parts", "action": EntityPart, "default": None}
    g.add_argument("--entity-type", part="type", metavar="TYPE",
                   help="users, clients, ips or brokers; users and clients together name a pair", **kw)
    g.add_argument("--entity-name", part="name", metavar="NAME", help="the entity's name (a broker id for brokers)", **kw)
    g.add_argument("--entity-default", part="default",
                   help="the default entity of the type (<default>)", **kw)
    for singular in ("user", "client", "ip", "broker"):
        plural = _ALIASES[singular]
        g.add_argument(f"--{singular}", part="name", entity_type=plural, metavar="NAME",
                       help=f"same as --entity-type {plural} --entity-name NAME", **kw)
        g.add_argument(f"--{singular}-defaults", part="default", entity_type=plural,
                       help=f"same as --entity-type {plural} --entity-default", **kw)


@dataclass(frozen=True)
class EntitySpec:
    """Entity options in order: (contract field, name | "<default>" | ANY)."""

    parts: tuple[tuple[str, Any], ...]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(f for f, _ in self.parts)

    @property
    def complete(self) -> bool:
        """Every type has a name or a default (one entity, not a filter)."""
        return bool(self.parts) and all(v is not ANY for _, v in self.parts)

    def entity(self) -> dict[str, Any]:
        """The contract entity object (only for a complete spec)."""
        return {f: v for f, v in self.parts}

    def matches(self, entity: dict[str, Any]) -> bool:
        """Same shape (same fields, broker listener aside) and the same names where given."""
        fields = set(entity) - {"listener"}
        if fields != set(self.fields):
            return False
        return all(v is ANY or entity.get(f) == v for f, v in self.parts)


def parse_entity(parts: Sequence[tuple[str, Any]] | None, *, require_names: bool) -> EntitySpec:
    """The ordered entity options into an `EntitySpec`, or a `UserError` saying what is wrong."""
    out: list[list[Any]] = []
    for kind, value in parts or ():
        if kind == "type":
            name = _ALIASES.get(value, value)
            if name not in ENTITY_TYPES:
                raise UserError(f"unknown --entity-type {value!r}: quotas are set on users, clients, ips or brokers")
            field = ENTITY_TYPES[name]
            if any(f == field for f, _ in out):
                raise UserError(f"--entity-type {name} is given twice")
            out.append([field, ANY])
            continue
        if not out:
            raise UserError("--entity-name/--entity-default must follow an --entity-type")
        if out[-1][1] is not ANY:
            raise UserError(f"{TYPE_LABEL[out[-1][0]]} has more than one --entity-name/--entity-default")
        out[-1][1] = DEFAULT if kind == "default" else _entity_name(out[-1][0], value)
    if not out:
        raise UserError("name an entity: --entity-type TYPE with --entity-name NAME or --entity-default")
    fields = {f for f, _ in out}
    incomplete = any(v is ANY for _, v in out)
    # a complete entity is checked by parse_config_record (the controller's own message)
    if incomplete and len(fields) > 1 and fields != {"user", "client_id"}:
        raise UserError("only users and clients can be combined into one entity "
                        f"(got {', '.join(_plural(f) for f, _ in out)})")
    if require_names:
        for f, v in out:
            if v is ANY:
                raise UserError(f"--entity-type {_plural(f)} needs --entity-name NAME or --entity-default")
    return EntitySpec(tuple((f, v) for f, v in out))


def _plural(field: str) -> str:
    return next(k for k, v in ENTITY_TYPES.items() if v == field)


def _entity_name(field: str, value: str) -> Any:
    if field == "broker" and value != DEFAULT:
        try:
            return int(value)
        except ValueError:
            raise UserError(f"broker {value!r}: --entity-name of brokers is a broker id (an integer)") from None
    return value


def parse_number(raw: str) -> Any:
    """A config value as a number when it is one; otherwise the raw text (validation says why)."""
    text = raw.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_add_config(text: str | None) -> dict[str, Any]:
    """`k1=v1,k2=v2` (kafka-configs --add-config) into {key: number-or-text}."""
    out: dict[str, Any] = {}
    for item in _split(text):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise UserError(f"--add-config: {item!r} is not key=value")
        if key in out:
            raise UserError(f"--add-config: {key} is given twice")
        out[key] = parse_number(value)
    return out


def parse_delete_config(text: str | None) -> list[str]:
    """`k1,k2` (kafka-configs --delete-config) into a list of keys."""
    keys: list[str] = []
    for item in _split(text):
        if "=" in item:
            raise UserError(f"--delete-config takes keys only, not {item!r}")
        if item not in keys:
            keys.append(item)
    return keys


def _split(text: str | None) -> list[str]:
    if text is None:
        return []
    items = [part.strip() for part in text.split(",")]
    if any(not part for part in items):
        raise UserError(f"empty item in {text!r}")
    return items


def _quota_key(key: str, field: str) -> tuple[str | None, str]:
    """(listener or None, contract key): kafka-configs' broker key spellings are accepted."""
    if field == "broker":
        if key in _BROKER_KEYS:
            return None, BROKER_RATE
        m = _LISTENER_KEY.match(key)
        if m:
            return m.group(1), BROKER_RATE
    return None, key


def build_records(spec: EntitySpec, add: dict[str, Any], delete: Sequence[str],
                  now_ms: int | None = None) -> list[tuple[dict[str, Any], ConfigUpdate]]:
    """The contract records an alter writes, each with its validated `ConfigUpdate`.

    Usually one record; a broker alter with `listener.name.L.max.connection.creation.rate`
    keys gives one record per listener (the listener is part of the contract entity).
    Raises `UserError` with the controller's reason for the first invalid record; then nothing
    must be written.
    """
    if not add and not delete:
        raise UserError("nothing to change: give --add-config k=v,... and/or --delete-config k,...")
    both = set(add) & set(delete)
    if both:
        raise UserError(f"{', '.join(sorted(both))}: in both --add-config and --delete-config")
    ts = int(time.time() * 1000) if now_ms is None else now_ms
    base = spec.entity()
    field = spec.fields[0]
    grouped: dict[str | None, dict[str, Any]] = {}
    changes = [(k, v) for k, v in add.items()] + [(k, None) for k in delete]
    for key, value in changes:
        listener, quota = _quota_key(key, field)
        quotas = grouped.setdefault(listener, {})
        if quota in quotas:
            raise UserError(f"{key}: the same quota is given twice")
        quotas[quota] = value
    out: list[tuple[dict[str, Any], ConfigUpdate]] = []
    for listener, quotas in grouped.items():
        entity = dict(base) if listener is None else {**base, "listener": listener}
        record = {"type": "quota_config", "v": 1, "ts": ts, "entity": entity, "quotas": quotas}
        try:
            update = parse_config_record(record)
        except ConfigError as exc:
            raise UserError(f"invalid config for {describe_entity(entity)}: {exc}") from None
        out.append((canonical_record(update), update))
    return out


def plain_number(value: float | None) -> int | float | None:
    """1048576.0 -> 1048576, so integral values are written (and shown) as integers."""
    if value is None:
        return None
    if math.isfinite(value) and value == int(value) and abs(value) < 2**63:
        return int(value)
    return value


def canonical_record(update: ConfigUpdate) -> dict[str, Any]:
    """The contract `quota_config` record for a validated update (values as validated)."""
    return {"type": "quota_config", "v": 1, "ts": update.ts, "entity": config_entity(update),
            "quotas": {k: plain_number(v) for k, v in update.quotas.items()}}


def describe_entity(entity: dict[str, Any]) -> str:
    """`user-principal 'alice', client-id '<default>'`, as kafka-configs names entities."""
    parts = [f"{TYPE_LABEL[f]} {entity[f]!r}" if f in TYPE_LABEL else f"listener {entity[f]!r}"
             for f in ("user", "client_id", "ip", "broker", "listener") if f in entity]
    return ", ".join(parts)
