"""The directive record (contract v1): what a valid one is, and the keys it is indexed under.

Every reader of the control topic takes its rules from here: `parse_directive` is what an
enforcer obeys (the subscriber's active set, so the gateway and the simulated brokers, and the
demo's and simulator's watcher), raising `BadDirective` with a countable reason;
`grouping_problem` is the weaker check the audit pairs directives by, since it reports a wrong
field as a difference rather than refusing the record. The allocation, the control topic's
other record, is validated by `app.contract.allocations` with the same error type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

SUPPORTED_VERSIONS: frozenset[int] = frozenset({1})
DEFAULT = "<default>"

#: Client quotas answered by `request_throttle` (Produce, Fetch and request-time quotas).
CLIENT_QUOTAS: frozenset[str] = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage"}
)
#: Quotas a Produce / Fetch response is throttled by (byte rate + request time, as in Kafka).
PRODUCE_QUOTAS: frozenset[str] = frozenset({"producer_byte_rate", "request_percentage"})
FETCH_QUOTAS: frozenset[str] = frozenset({"consumer_byte_rate", "request_percentage"})
MUTATION_QUOTA = "controller_mutation_rate"
IP_QUOTA = "connection_creation_rate"
BROKER_CONNECTION_QUOTA = "max_connection_creation_rate"

#: Which actions make sense for which quota; any other pairing is a bad directive.
ACTIONS_BY_QUOTA: Mapping[str, frozenset[str]] = {
    "producer_byte_rate": frozenset({"throttle"}),
    "consumer_byte_rate": frozenset({"throttle"}),
    "request_percentage": frozenset({"throttle"}),
    MUTATION_QUOTA: frozenset({"throttle", "reject"}),
    IP_QUOTA: frozenset({"close_connection"}),
    BROKER_CONNECTION_QUOTA: frozenset({"delay_connection"}),
}

# Index families: which lookup table a directive lives in.
CLIENT, MUTATION, IP, LISTENER = "client", "mutation", "ip", "listener"


#: The longest throttle Kafka computes (byte rates saturate at Integer.MAX_VALUE ms; the other
#: quotas stay far below): a directive asking for more is forged or broken, not obeyed.
MAX_THROTTLE_MS = 2**31 - 1
#: How far ahead of the reader's clock a directive's `ts` may be (the workers' stream clock
#: accepts events up to a day off).
MAX_FUTURE_MS = 86_400_000
#: The largest control record value a reader takes (the broker plugin's too): an allocation at
#: every other bound (1,024 enforcers, names of 1,024 characters, each escaped) stays far below
#: it; a larger record is refused unread (`too_large`), whatever the topic lets in.
MAX_RECORD_BYTES = 262_144


class BadDirective(ValueError):
    """A record that is not a valid v1 directive; `reason` is a short, countable label."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ParsedDirective:
    """A validated directive and the keys it is indexed and replaced under."""

    family: str  # CLIENT, MUTATION, IP or LISTENER
    bucket: tuple[str, ...]  # lookup key inside the family's table
    key: tuple[Any, ...]  # replacement key: (scope, broker, quota, action, entity)
    scope: str
    broker: int | None  # the broker a `scope: broker` directive is for
    entity_broker: str | None  # delay_connection only: the entity's broker id or "<default>"
    quota: str
    action: str
    ts: int
    until: int
    directive: Mapping[str, Any]


def _int(d: Mapping[str, Any], name: str) -> int:
    value = d.get(name)
    if value is None:
        raise BadDirective("missing_field", name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadDirective("wrong_type", f"{name} must be an integer")
    if value < 0:
        raise BadDirective("negative", name)
    return value


def _str(entity: Mapping[str, Any], name: str, required: bool) -> str:
    value = entity.get(name)
    if value is None:
        if required:
            raise BadDirective("bad_entity", f"entity.{name} missing")
        return ""
    if not isinstance(value, str):
        raise BadDirective("bad_entity", f"entity.{name} must be a string")
    return value


def _broker_id(value: Any) -> str:
    """Entity broker ids arrive as int, digit string or "<default>"; compare them as strings."""
    if isinstance(value, bool):
        raise BadDirective("bad_entity", "entity.broker must be an id or <default>")
    if isinstance(value, int) and value >= 0:
        return str(value)
    if isinstance(value, str) and (value == DEFAULT or value.isdigit()):
        return str(int(value)) if value.isdigit() else value
    raise BadDirective("bad_entity", "entity.broker must be an id or <default>")


def _entity(quota: str, entity: Any) -> tuple[str, tuple[str, ...], str | None]:
    """Return (family, bucket key, entity broker) for the entity shape the quota requires."""
    if not isinstance(entity, Mapping):
        raise BadDirective("bad_entity", "entity must be an object")
    if quota in CLIENT_QUOTAS or quota == MUTATION_QUOTA:
        if "user" not in entity and "client_id" not in entity:
            raise BadDirective("bad_entity", "entity needs user and/or client_id")
        user = _str(entity, "user", required=False)
        client_id = _str(entity, "client_id", required=False)
        return (MUTATION if quota == MUTATION_QUOTA else CLIENT), (user, client_id), None
    if quota == IP_QUOTA:
        ip = _str(entity, "ip", required=True)
        if not ip:
            raise BadDirective("bad_entity", "entity.ip is empty")
        return IP, (ip,), None
    if "broker" not in entity:
        raise BadDirective("bad_entity", "entity.broker missing")
    listener = _str(entity, "listener", required=False)
    return LISTENER, (listener,), _broker_id(entity["broker"])


def parse_directive(directive: Any) -> ParsedDirective:
    """Validate a decoded record; raise `BadDirective` (never anything else) when it is unusable."""
    if not isinstance(directive, Mapping):
        raise BadDirective("not_an_object")
    version = directive.get("v")
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise BadDirective("wrong_version", repr(version))
    ts = _int(directive, "ts")
    until = _int(directive, "until")
    if until - ts > MAX_THROTTLE_MS:
        raise BadDirective("until_out_of_range",
                           f"until is {until - ts} ms after ts (no throttle exceeds {MAX_THROTTLE_MS})")
    scope = directive.get("scope")
    if scope not in ("broker", "cluster"):
        raise BadDirective("bad_scope", repr(scope))
    broker: int | None = None
    if scope == "broker":
        broker = _int(directive, "broker")
    quota = directive.get("quota")
    if not isinstance(quota, str) or quota not in ACTIONS_BY_QUOTA:
        raise BadDirective("unknown_quota", repr(quota))
    action = directive.get("action")
    if action not in ACTIONS_BY_QUOTA[quota]:
        raise BadDirective("bad_action", f"{action!r} for {quota}")
    throttle = directive.get("throttle_time_ms")
    if throttle is not None and (
        isinstance(throttle, bool) or not isinstance(throttle, (int, float)) or throttle < 0
    ):
        raise BadDirective("wrong_type", "throttle_time_ms must be a number >= 0")
    family, bucket, entity_broker = _entity(quota, directive.get("entity"))
    entity_key = bucket if entity_broker is None else (entity_broker, *bucket)
    return ParsedDirective(
        family=family,
        bucket=bucket,
        key=(scope, broker, quota, action, entity_key),
        scope=scope,
        broker=broker,
        entity_broker=entity_broker,
        quota=quota,
        action=action,
        ts=ts,
        until=until,
        directive=directive,
    )


def grouping_problem(record: Any) -> str | None:
    """Why a decoded control record (directive or allocation) has no group to pair it in, or
    None: it is an object with an integer `ts`, a `quota`, an `entity` object and a `broker`
    that is an integer or null."""
    if not isinstance(record, dict):
        return "not a JSON object"
    ts = record.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int):
        return "ts missing or not an integer"
    if not isinstance(record.get("quota"), str):
        return "quota missing"
    if not isinstance(record.get("entity"), dict):
        return "entity missing"
    broker = record.get("broker")
    if broker is not None and (isinstance(broker, bool) or not isinstance(broker, int)):
        return "broker must be an integer or null"
    return None
