"""Where `quota-streams produce` sends each contract line: topic, key and value.

| record | topic | key |
|---|---|---|
| request, mutation | request / mutation topic | `{"client_id":…,"user":…}` |
| connection | connection topic | `{"ip":…}` |
| quota_config | config topic | `{"entity":…,"keys":[…]}` |
| batch | the topic of its inner events' type | the key of its first inner event |

Keys are canonical JSON (sorted keys, no spaces) of the principal the contract keys by, so
they are unambiguous whatever characters a user or client id holds (`app.contract.keys`). A batch whose events are
all of one type is sent as it is; a mixed batch is split into one batch per type (order kept
within each type, the batch's `broker` default kept), and quota_config events in a batch go to
the config topic as records of their own. Lines are validated with the engine's
`parse_record` (as the workers will): a bad line is skipped, and so is a bad event of a batch,
whose good events are sent (as the workers would take them). With `columnar`, request records
are sent as columnar batches (`app.intake.columnar`) of the same events.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, cast

import orjson

from app.contract.keys import config_key, event_key
from app.engine.configs import ConfigUpdate
from app.engine.events import BadEvent, Event, Parsed, RequestEvent, parse_record
from app.intake.columnar import encode_events

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
    line: int = 0  # of the input, for reports
    #: a request record's validated events (what a columnar record is made of)
    requests: tuple[RequestEvent, ...] = ()


@dataclass
class Routed:
    """What one line becomes: its records, and why each of its left-out batch events was bad."""

    records: list[Outgoing]
    skipped: list[str] = field(default_factory=list)


def _kind(item: Parsed) -> str:
    return "config" if isinstance(item, ConfigUpdate) else item.type


def route_line(line: bytes, number: int = 0, columnar: bool = False) -> Routed:
    """The records one JSON line (line `number` of the input) becomes, or `BadLine` with the
    reason it is skipped whole."""
    routed = _route(line, number)
    if columnar:
        routed.records = [replace(o, value=encode_events(o.requests)) if o.requests else o
                          for o in routed.records]
    return routed


def _route(line: bytes, number: int) -> Routed:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadLine(f"not JSON: {exc}") from None
    items = parse_record(obj)
    is_batch = isinstance(obj, dict) and obj.get("type") == "batch"
    if not is_batch or (len(items) == 1 and isinstance(items[0], BadEvent) and items[0].raw is obj):
        item = items[0]
        if isinstance(item, BadEvent):
            raise BadLine(item.reason)
        if isinstance(item, ConfigUpdate):
            return Routed([Outgoing("config", config_key(item), line.strip(), item, number)])
        return Routed([Outgoing(item.type, event_key(item), line.strip(), line=number,
                                requests=_requests([item]))])
    if not items:
        raise BadLine("batch has no events")
    skipped = [f"event {i + 1} of the batch: {item.reason}"
               for i, item in enumerate(items) if isinstance(item, BadEvent)]
    if len(skipped) == len(items):
        raise BadLine(f"no good event in the batch ({skipped[0]})")
    kinds = {_kind(item) for item in items if not isinstance(item, BadEvent)}
    if not skipped and len(kinds) == 1 and "config" not in kinds:
        first = cast(Event, items[0])  # no bad event and no config: an event
        return Routed([Outgoing(first.type, event_key(first), line.strip(), line=number,
                                requests=_requests(items))])
    return Routed(_split(obj, items, number), skipped)


def _split(batch: dict[str, Any], items: list[Parsed], number: int) -> list[Outgoing]:
    """A batch's good events, one batch per type (configs: one record each)."""
    raws: list[Any] = batch["events"]
    groups: dict[str, list[tuple[Any, Event]]] = {}
    out: list[Outgoing] = []
    for raw, item in zip(raws, items):
        if isinstance(item, BadEvent):
            continue
        if isinstance(item, ConfigUpdate):
            out.append(Outgoing("config", config_key(item), orjson.dumps(raw), item, number))
        else:
            groups.setdefault(item.type, []).append((raw, item))
    head = {"type": "batch", "v": batch["v"]}
    if batch.get("broker") is not None:
        head["broker"] = batch["broker"]
    for kind, members in groups.items():
        sub = {**head, "events": [raw for raw, _ in members]}
        out.append(Outgoing(kind, event_key(members[0][1]), orjson.dumps(sub), line=number,
                            requests=_requests([item for _, item in members])))
    return out


def _requests(items: list[Parsed]) -> tuple[RequestEvent, ...]:
    """The validated events of a request record (none for other kinds)."""
    return tuple(i for i in items if isinstance(i, RequestEvent))
