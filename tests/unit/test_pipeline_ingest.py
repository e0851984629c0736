"""The ingest's record handling: good events become rows in the outbox, the rest dead letters."""

from __future__ import annotations

from typing import Any

import orjson

from app.audit.synth import CONFIGS, T0
from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import StreamClock, parse_event
from app.pipeline.codec import decode_rows, encode_rows, row_event
from app.pipeline.ingest import Outbox, parse_source, route_events
from app.pipeline.routing import Router


def router() -> Router:
    engine = QuotaEngine(EngineSettings())
    for record in CONFIGS:
        update = parse_event({"type": "quota_config", "v": 1, "ts": T0, **record})
        assert isinstance(update, ConfigUpdate)
        engine.process(update)
    return Router(engine, 8)


def route_record(value: bytes, clock: StreamClock, r: Router, appended_ms: int,
                 outbox: Outbox) -> list[tuple[str, Any]]:
    """The ingest's work on one source record: its rows to the outbox, its dead letters back."""
    events, dead = parse_source(value, clock)
    route_events(events, r, appended_ms, outbox)
    return dead


def request(ts: int, **extra: Any) -> dict[str, Any]:
    return {"type": "request", "v": 1, "ts": ts, "user": "alice", "client_id": "app-1",
            "api": "Produce", "bytes": 100, **extra}


def test_rows_and_dead_letters_of_a_batch() -> None:
    bad = request(T0, bytes=-1)
    config = {"type": "quota_config", "v": 1, "ts": T0, "entity": {"user": "x"},
              "quotas": {"producer_byte_rate": 1000}}
    batch = {"type": "batch", "v": 1, "broker": 1,
             "events": [request(T0), bad, request(T0 + 1, gateway=3)]}
    outbox = Outbox()
    clock = StreamClock()
    r = router()
    dead = route_record(orjson.dumps(batch), clock, r, 42, outbox)
    assert [raw for _, raw in dead] == [bad] and "bytes" in dead[0][0]
    dead = route_record(orjson.dumps(config), clock, r, 43, outbox)
    assert [reason for reason, _ in dead] == ["quota_config records belong on the config topic"]
    assert route_record(b"{not json", clock, r, 44, outbox)[0][0].startswith("not JSON")
    assert outbox.size == 2 and outbox.counts == {"request": 2}
    rows, held, counts = outbox.take()
    assert outbox.size == 0 and not outbox.rows and held == [] and counts == {"request": 2}
    events = [row_event(row) for part in rows.values() for row in decode_rows(encode_rows(part))]
    assert [(e.ts, e.broker, e.gateway, only, appended) for e, only, appended in events] == [
        (T0, 1, -1, None, 42), (T0 + 1, 1, 3, None, 42)]


def test_a_request_row_written_before_gateways_reads_as_unnamed() -> None:
    row = ["r", T0, 2, "PLAINTEXT", "alice", "app", "", "Produce", 100, 0.0, 0.0, False, 1,
           ["producer_byte_rate"], 77]
    event, only, appended = row_event(row)
    assert (event.broker, event.gateway, event.enforcer, only, appended) == (
        2, -1, 2, ("producer_byte_rate",), 77)


def test_clock_skew_is_a_dead_letter() -> None:
    outbox = Outbox()
    clock = StreamClock()
    r = router()
    assert route_record(orjson.dumps({**request(T0), "broker": 1}), clock, r, 0, outbox) == []
    far = {**request(T0 + 10 * 86_400_000), "broker": 1}
    dead = route_record(orjson.dumps(far), clock, r, 0, outbox)
    assert len(dead) == 1 and dead[0][1] == far and outbox.size == 1
