"""Step 1 -> step 2 event encoding: every event comes back exactly as validated, through a
marshalled chunk of items as the shuffle carries it."""

from __future__ import annotations

import marshal
from typing import Any

import pytest

from app.audit.event_codec import EVENT_KINDS, MARSHAL_VERSION, event_args, make_event
from app.engine.events import parse_event

EVENTS = [
    {"type": "request", "v": 1, "ts": 1_763_800_000_000, "broker": 3, "user": "alice",
     "client_id": "app", "api": "Produce", "bytes": 2345, "thread_time_ms": 0.2,
     "network_time_ms": 0.02, "listener": "EXTERNAL", "ip": "10.0.0.1", "exempt": True,
     "count": 7, "gateway": 4},
    # integer times stay integers; the largest ids survive
    {"type": "request", "v": 1, "ts": 5, "broker": 2**31 - 1, "gateway": 2**31 - 1, "user": "",
     "client_id": "é",
     "api": "Fetch", "thread_time_ms": 3, "network_time_ms": 10**15},
    {"type": "connection", "v": 1, "ts": 9, "broker": 1, "listener": "INTERNAL",
     "ip": "203.0.113.9", "inter_broker": True},
    {"type": "mutation", "v": 1, "ts": 11, "broker": 0, "user": "ops", "client_id": "tf",
     "api": "CreateTopics", "api_version": 7, "partitions": 12, "validate_only": True},
]


#: Every attribute of each event type, named here: a compiled (mypyc) class has no `__slots__`.
NAMES = {
    "RequestEvent": ("ts", "broker", "listener", "user", "client_id", "ip", "api", "bytes",
                     "thread_ms", "network_ms", "exempt", "count", "gateway"),
    "ConnectionEvent": ("ts", "broker", "listener", "ip", "inter_broker"),
    "MutationEvent": ("ts", "broker", "user", "client_id", "api", "api_version", "partitions",
                      "validate_only", "strict"),
}


def fields(event: Any) -> list[tuple[str, Any, type]]:
    names = NAMES[type(event).__name__]
    return [(n, getattr(event, n), type(getattr(event, n))) for n in names]


@pytest.mark.parametrize("raw", EVENTS, ids=lambda r: f"{r['type']}-{r['ts']}")
def test_round_trip_keeps_values_and_types(raw: dict[str, Any]) -> None:
    event = parse_event(raw)
    kind, args = event_args(event)  # type: ignore[arg-type]
    assert kind in EVENT_KINDS
    chunk = marshal.loads(marshal.dumps([(0, 0, 0, 0, kind, args)], MARSHAL_VERSION))
    back = make_event(chunk[0][4], chunk[0][5])
    assert type(back) is type(event)
    assert fields(back) == fields(event)


def test_kinds_do_not_collide_with_bad_rows() -> None:
    from app.audit.recompute import ROW_BAD

    assert ROW_BAD not in EVENT_KINDS
