"""Contract v1 events: validation of untrusted JSON objects into typed events.

Every input is untrusted. `parse_record` never raises on data: a bad event comes back as a
`BadEvent` with a reason, so every driver dead-letters it the same way and counts it.
"""

from __future__ import annotations

from typing import Any, Mapping, Union

from app.engine.brief import brief
from app.engine.configs import ConfigError, ConfigUpdate, parse_config_record

VERSION = 1
MAX_NAME = 1024
MAX_TS = 2**53  # epoch ms well past year 200000; anything above is not a timestamp
MAX_BATCH = 100_000
#: Largest amount (bytes, partitions, count, times) an event may carry. Bigger integers would
#: overflow the float arithmetic of the rates and buckets (OverflowError) instead of dead-lettering.
MAX_AMOUNT = 10**15
#: Largest request time (ms) an event may carry: as whole nanoseconds (`engine.nanos`) it still
#: fits the 64-bit columns of a columnar batch (about 285 years).
MAX_TIME_MS = 9_000_000_000_000
#: Largest broker or gateway id: Kafka's node ids are 32-bit, and allocation state holds them so.
MAX_ID = 2**31 - 1
#: Largest `throttle_ms` an event may carry (an unsigned 32-bit column; a writer that sums the
#: throttles of many requests clamps to it)
MAX_THROTTLE_MS = 2**32 - 1

#: First request version whose controller mutation quota is strict (reject, not throttle).
STRICT_SINCE = {"CreateTopics": 6, "DeleteTopics": 5, "CreatePartitions": 3}


class RequestEvent:
    """Usage of one (pre-aggregated) request: bytes and thread/network time.

    `gateway` is the gateway instance that measured it (-1: none named): with gateways named,
    a gateway, not a broker, is what enforces an allocation (`enforcer`). `throttle_ms` is the
    throttle its enforcer answered it with (summed over the requests `count` sums): a muted
    client uses nothing, and this is how the workers tell a throttled enforcer from an idle one.
    """

    __slots__ = ("ts", "broker", "listener", "user", "client_id", "ip", "api", "bytes",
                 "thread_ms", "network_ms", "exempt", "count", "gateway", "throttle_ms")
    type = "request"

    def __init__(self, ts: int, broker: int, listener: str, user: str, client_id: str, ip: str,
                 api: str, bytes: int, thread_ms: float, network_ms: float, exempt: bool,
                 count: int, gateway: int = -1, throttle_ms: int = 0) -> None:
        self.ts = ts
        self.broker = broker
        self.listener = listener
        self.user = user
        self.client_id = client_id
        self.ip = ip
        self.api = api
        self.bytes = bytes
        self.thread_ms = thread_ms
        self.network_ms = network_ms
        self.exempt = exempt
        self.count = count
        self.gateway = gateway
        self.throttle_ms = throttle_ms

    @property
    def enforcer(self) -> int:
        """Who enforces this request's allocations: its gateway, else its broker."""
        return self.gateway if self.gateway >= 0 else self.broker


class ConnectionEvent:
    """One accepted TCP connection on a listener."""

    __slots__ = ("ts", "broker", "listener", "ip", "inter_broker")
    type = "connection"

    def __init__(self, ts: int, broker: int, listener: str, ip: str, inter_broker: bool) -> None:
        self.ts = ts
        self.broker = broker
        self.listener = listener
        self.ip = ip
        self.inter_broker = inter_broker


class MutationEvent:
    """Partitions one topic of a CreateTopics/CreatePartitions/DeleteTopics request asked for."""

    __slots__ = ("ts", "broker", "user", "client_id", "api", "api_version", "partitions",
                 "validate_only", "strict")
    type = "mutation"

    def __init__(self, ts: int, broker: int, user: str, client_id: str, api: str,
                 api_version: int, partitions: int, validate_only: bool) -> None:
        self.ts = ts
        self.broker = broker
        self.user = user
        self.client_id = client_id
        self.api = api
        self.api_version = api_version
        self.partitions = partitions
        self.validate_only = validate_only
        self.strict = api_version >= STRICT_SINCE[api]


class BadEvent:
    """An input that failed validation: the reason, and the raw object for the dead letter."""

    __slots__ = ("reason", "raw")
    type = "bad"

    def __init__(self, reason: str, raw: Any) -> None:
        self.reason = reason
        self.raw = raw


Event = Union[RequestEvent, ConnectionEvent, MutationEvent]
Parsed = Union[RequestEvent, ConnectionEvent, MutationEvent, ConfigUpdate, BadEvent]


class _Invalid(Exception):
    pass


def _int(d: Mapping[str, Any], key: str, minimum: int = 0, default: Any = _Invalid,
         maximum: int | None = None) -> int:
    value = d.get(key, default)
    if value is _Invalid:
        raise _Invalid(f"missing {key}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{key} must be an integer")
    if value < minimum:
        raise _Invalid(f"{key} must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise _Invalid(f"{key} is out of range")
    return value


def _num(d: Mapping[str, Any], key: str, default: Any = _Invalid, maximum: float = MAX_AMOUNT
         ) -> float:
    value = d.get(key, default)
    if value is _Invalid:
        raise _Invalid(f"missing {key}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise _Invalid(f"{key} must be a number")
    if value < 0:
        raise _Invalid(f"{key} must not be negative")
    if value > maximum:
        raise _Invalid(f"{key} is out of range")
    return value


def _str(d: Mapping[str, Any], key: str, default: Any = _Invalid) -> str:
    value = d.get(key, default)
    if value is _Invalid:
        raise _Invalid(f"missing {key}")
    if not isinstance(value, str):
        raise _Invalid(f"{key} must be a string")
    if len(value) > MAX_NAME:
        raise _Invalid(f"{key} is longer than {MAX_NAME} characters")
    return value


def _bool(d: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise _Invalid(f"{key} must be true or false")
    return value


def _common(d: Mapping[str, Any], default_broker: int | None) -> tuple[int, int]:
    if d.get("v") != VERSION:
        raise _Invalid(f"unsupported version v={brief(d.get('v'))} (this processor reads v={VERSION})")
    ts = _int(d, "ts")
    if ts >= MAX_TS:
        raise _Invalid("ts is not an epoch-ms timestamp")
    broker = _int(d, "broker", default=default_broker if default_broker is not None else _Invalid,
                  maximum=MAX_ID)
    return ts, broker


def parse_event(d: Any, default_broker: int | None = None) -> Parsed:
    """One contract object (not a batch) into a typed event, or a `BadEvent` saying why."""
    try:
        if not isinstance(d, dict):
            raise _Invalid("not a JSON object")
        kind = d.get("type")
        if kind == "request":
            ts, broker = _common(d, default_broker)
            api = _str(d, "api")
            if not api:
                raise _Invalid("api must not be empty")
            return RequestEvent(
                ts, broker, _str(d, "listener", ""), _str(d, "user"), _str(d, "client_id"),
                _str(d, "ip", ""), api, _int(d, "bytes", default=0, maximum=MAX_AMOUNT),
                _num(d, "thread_time_ms", 0.0, MAX_TIME_MS), _num(d, "network_time_ms", 0.0, MAX_TIME_MS),
                _bool(d, "exempt"), _int(d, "count", minimum=0, default=1, maximum=MAX_AMOUNT),
                -1 if d.get("gateway") is None else _int(d, "gateway", maximum=MAX_ID),
                _int(d, "throttle_ms", default=0, maximum=MAX_THROTTLE_MS),
            )
        if kind == "connection":
            ts, broker = _common(d, default_broker)
            ip = _str(d, "ip")
            if not ip:
                raise _Invalid("ip must not be empty")
            return ConnectionEvent(ts, broker, _str(d, "listener"), ip, _bool(d, "inter_broker"))
        if kind == "mutation":
            ts, broker = _common(d, default_broker)
            api = _str(d, "api")
            if api not in STRICT_SINCE:
                raise _Invalid(f"api must be one of {', '.join(STRICT_SINCE)}")
            return MutationEvent(
                ts, broker, _str(d, "user"), _str(d, "client_id"), api,
                _int(d, "api_version"), _int(d, "partitions", maximum=MAX_AMOUNT),
                _bool(d, "validate_only"),
            )
        if kind == "quota_config":
            if d.get("v") != VERSION:
                raise _Invalid(f"unsupported version v={brief(d.get('v'))}")
            return parse_config_record(d)
        if kind == "batch":
            raise _Invalid("a batch cannot be nested in a batch")
        raise _Invalid(f"unknown type {brief(kind)}")
    except (_Invalid, ConfigError) as exc:
        return BadEvent(str(exc), d)


def parse_record(d: Any) -> list[Parsed]:
    """A record (single event, config or batch) into its events, in the broker's order.

    A bad inner event of a batch is returned as a `BadEvent` in its place; the rest stand.
    """
    if isinstance(d, dict) and d.get("type") == "batch":
        if d.get("v") != VERSION:
            return [BadEvent(f"unsupported batch version v={brief(d.get('v'))}", d)]
        events = d.get("events")
        broker = d.get("broker")
        if not isinstance(events, list):
            return [BadEvent("batch events must be a list", d)]
        if len(events) > MAX_BATCH:
            return [BadEvent(f"batch has {len(events)} events (max {MAX_BATCH})", d)]
        if broker is not None and (isinstance(broker, bool) or not isinstance(broker, int) or broker < 0):
            return [BadEvent("batch broker must be an integer >= 0", d)]
        return [parse_event(e, broker) for e in events]
    return [parse_event(d)]
