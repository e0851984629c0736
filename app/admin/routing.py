"""Where `quota-streams produce` sends each contract line: topic, key and value.

| record | topic | key |
|---|---|---|
| request, mutation | request / mutation topic | `{"client_id":…,"user":…}` |
| connection | connection topic | `{"ip":…}` |
| quota_config | config topic | `{"entity":…,"keys":[…]}` (`config_topic.config_key`) |
| batch | the topic of its inner events' type | the key of its first inner event |

Keys are canonical JSON (sorted keys, no spaces) of the principal the contract keys by, so
they are unambiguous whatever characters a user or client id holds. A batch whose events are
all of one type is sent as it is; a mixed batch is split into one batch per type (order kept
within each type, the batch's `broker` default kept), and quota_config events in a batch go to
the config topic as records of their own. Lines are validated with the engine's
`parse_record` (as the workers will): a line with any bad event is skipped whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.admin.config_topic import canonical_json, config_key
from app.engine.configs import ConfigUpdate
from app.engine.events import BadEvent, ConnectionEvent, Parsed, parse_record

KINDS = ("request", "connection", "mutation", "config")


class BadLine(ValueError):
    """A line that cannot be sent; the message says why (one line)."""


@dataclass(frozen=True)
class Outgoing:
    """One Kafka record to send: `kind` picks the topic (see KINDS)."""

    kind: str
    key: bytes
    value: bytes
    update: ConfigUpdate | None = None  # config records: partitioned by entity


def event_key(item: Parsed) -> bytes:
    """The contract's key of an event: the ip for connections, else user + client_id."""
    if isinstance(item, ConnectionEvent):
        return canonical_json({"ip": item.ip})
    return canonical_json({"user": item.user, "client_id": item.client_id})  # type: ignore[union-attr]


def _kind(item: Parsed) -> str:
    return "config" if isinstance(item, ConfigUpdate) else item.type


def route_line(line: bytes) -> list[Outgoing]:
    """The records one JSON line becomes, or `BadLine` with the reason it is skipped."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadLine(f"not JSON: {exc}") from None
    items = parse_record(obj)
    is_batch = isinstance(obj, dict) and obj.get("type") == "batch"
    for i, item in enumerate(items):
        if isinstance(item, BadEvent):
            where = f"event {i + 1} of the batch: " if is_batch and item.raw is not obj else ""
            raise BadLine(where + item.reason)
    value = line.strip()
    if not is_batch:
        item = items[0]
        if isinstance(item, ConfigUpdate):
            return [Outgoing("config", config_key(item), value, item)]
        return [Outgoing(item.type, event_key(item), value)]
    if not items:
        raise BadLine("batch has no events")
    kinds = {_kind(item) for item in items}
    if len(kinds) == 1 and "config" not in kinds:
        return [Outgoing(items[0].type, event_key(items[0]), value)]
    return _split(obj, items)


def _split(batch: dict[str, Any], items: list[Parsed]) -> list[Outgoing]:
    raws: list[Any] = batch["events"]
    groups: dict[str, list[tuple[Any, Parsed]]] = {}
    out: list[Outgoing] = []
    for raw, item in zip(raws, items):
        if isinstance(item, ConfigUpdate):
            out.append(Outgoing("config", config_key(item), orjson.dumps(raw), item))
        else:
            groups.setdefault(item.type, []).append((raw, item))
    head = {"type": "batch", "v": batch["v"]}
    if batch.get("broker") is not None:
        head["broker"] = batch["broker"]
    for kind, members in groups.items():
        sub = {**head, "events": [raw for raw, _ in members]}
        out.append(Outgoing(kind, event_key(members[0][1]), orjson.dumps(sub)))
    return out
