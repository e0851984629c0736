"""Step 1 -> step 2 sample encoding: every sample comes back exactly as validated, through a
marshalled chunk of items as the shuffle carries it."""

from __future__ import annotations

import marshal
from typing import Any

import pytest

from app.audit.event_codec import EVENT_KINDS, MARSHAL_VERSION, event_args, make_event
from app.audit.request_items import ROW_REQUEST, append_request, request_payload
from app.engine.batch import COLUMNS, RequestColumns
from app.intake.records import decode_json

EVENTS = [
    {"type": "request", "v": 1, "ts": 1_763_800_000_000, "broker": 3, "user": "alice",
     "client_id": "app", "api": "Produce", "bytes": 2345, "thread_time_ms": 0.2,
     "network_time_ms": 0.02, "listener": "EXTERNAL", "ip": "10.0.0.1", "exempt": True,
     "count": 7, "gateway": 4},
    # integer times stay integers; the largest ids survive
    {"type": "request", "v": 1, "ts": 5, "broker": 2**31 - 1, "gateway": 2**31 - 1, "user": "",
     "client_id": "é",
     "api": "Fetch", "thread_time_ms": 3, "network_time_ms": 9 * 10**12},
    {"type": "connection", "v": 1, "ts": 9, "broker": 1, "listener": "INTERNAL",
     "ip": "203.0.113.9", "inter_broker": True},
    {"type": "mutation", "v": 1, "ts": 11, "broker": 0, "user": "ops", "client_id": "tf",
     "api": "CreateTopics", "api_version": 7, "partitions": 12, "validate_only": True},
]


#: Every attribute of each event type, named here: a compiled (mypyc) class has no `__slots__`.
NAMES = {
    "ConnectionEvent": ("ts", "broker", "listener", "ip", "inter_broker"),
    "MutationEvent": ("ts", "broker", "user", "client_id", "api", "api_version", "partitions",
                      "validate_only", "strict"),
}


def fields(event: Any) -> list[tuple[str, Any, type]]:
    names = NAMES[type(event).__name__]
    return [(n, getattr(event, n), type(getattr(event, n))) for n in names]


def shipped(kind: int, payload: Any) -> Any:
    """An item through a marshalled chunk, as the shuffle carries it."""
    chunk = marshal.loads(marshal.dumps([(0, 0, 0, 0, kind, payload)], MARSHAL_VERSION))
    return chunk[0][5]


def row(batch: RequestColumns, i: int) -> list[Any]:
    return [batch.names[batch.column(c)[i]] if c in NAMED else batch.column(c)[i]
            for c in COLUMNS]


NAMED = {"listener", "user", "client_id", "ip", "api"}


@pytest.mark.parametrize("raw", EVENTS, ids=lambda r: f"{r['type']}-{r['ts']}")
def test_round_trip_keeps_values_and_types(raw: dict[str, Any]) -> None:
    decoded = decode_json(raw, 77, archive=False)
    assert not decoded.dead
    if raw["type"] == "request":
        payload = shipped(ROW_REQUEST, request_payload(decoded.requests, 0))
        back = RequestColumns()
        append_request(back, payload, 77)
        assert row(back, 0) == row(decoded.requests, 0)
        assert [type(v) for v in row(back, 0)] == [type(v) for v in row(decoded.requests, 0)]
        return
    event = decoded.others[0]
    kind, args = event_args(event)
    assert kind in EVENT_KINDS
    back_event = make_event(kind, shipped(kind, args))
    assert type(back_event) is type(event)
    assert fields(back_event) == fields(event)


def test_request_times_cross_as_whole_nanoseconds() -> None:
    decoded = decode_json(EVENTS[0], 0, archive=False)
    assert decoded.requests.thread_ns == [200_000] and decoded.requests.network_ns == [20_000]


def test_kinds_do_not_collide_with_bad_rows() -> None:
    from app.audit.recompute import ROW_BAD

    assert ROW_BAD not in EVENT_KINDS
