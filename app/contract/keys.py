"""The record keys of every topic the contract names, built here and nowhere else.

| topic | key | built by |
|---|---|---|
| event topics (gateway, simulated broker) | `gateway/<id>`, `gateway/unnamed-<n>`, `broker/<id>`: the source that measured the events | `gateway_source`, `broker_source` |
| event topics (`quota-streams produce`) | `{"client_id":…,"user":…}`, or `{"ip":…}` for connections: the principal | `event_key` |
| config topic | `{"entity":…,"keys":[…]}`: the entity and its sorted quota keys | `config_key` |
| control topic | `<quota>\\|<entity as JSON>`: one window's records in one partition, in order | `directive_key` |

JSON keys are canonical (sorted object keys, no spaces), so one value has one key whatever
characters a name holds. Why the config key holds the quota keys: `app.admin.config_topic`.
The workers never read an event record's key; the seal (`app.signing`) covers the config and
control keys, so a reader of an archive that kept no keys derives them with these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from app.engine.configs import ConfigUpdate
from app.engine.events import ConnectionEvent, Event

GATEWAY, BROKER = "gateway", "broker"


def canonical_json(obj: Any) -> bytes:
    """Compact JSON with sorted object keys: one byte string per value."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def gateway_source(gateway_id: int | None, number: int) -> bytes:
    """The key of a gateway's event records: its `--gateway-id`, else `unnamed-<number>`
    (`number` drawn at its start)."""
    return f"{GATEWAY}/{f'unnamed-{number}' if gateway_id is None else gateway_id}".encode()


def broker_source(broker_id: int) -> bytes:
    """The key of a (simulated) broker's event records."""
    return f"{BROKER}/{broker_id}".encode()


def event_key(event: Event) -> bytes:
    """The principal key of an event record: the ip for connections, else user + client_id."""
    if isinstance(event, ConnectionEvent):
        return canonical_json({"ip": event.ip})
    return canonical_json({"user": event.user, "client_id": event.client_id})


def config_entity(update: ConfigUpdate) -> dict[str, Any]:
    """The contract entity of a validated config, in its normal form (IP addresses normalised)."""
    if update.kind == "client":
        user, client = update.entity
        entity: dict[str, Any] = {}
        if user is not None:
            entity["user"] = user
        if client is not None:
            entity["client_id"] = client
        return entity
    if update.kind == "ip":
        return {"ip": update.entity[0]}
    broker, listener = update.entity
    return {"broker": broker} if listener is None else {"broker": broker, "listener": listener}


def config_key(update: ConfigUpdate) -> bytes:
    """The compaction-safe key of a validated config record."""
    return canonical_json({"entity": config_entity(update), "keys": sorted(update.quotas)})


def directive_key(record: Mapping[str, Any]) -> bytes:
    """The control topic's key of a directive or allocation, `<quota>|<entity as JSON>`.
    Raises KeyError when the record has no `quota` or `entity`."""
    return str(record["quota"]).encode() + b"|" + orjson.dumps(record["entity"])
