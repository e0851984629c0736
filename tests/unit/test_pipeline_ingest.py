"""The ingest's record handling: good samples go to the outbox by route, the rest are dead
letters; the internal records carry them to the aggregate unchanged."""

from __future__ import annotations

from typing import Any

import orjson

from app.audit.synth import CONFIGS, T0
from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import MutationEvent, parse_event
from app.intake.clock import StreamClock
from app.intake.records import decode_source
from app.intake.routes import Router
from app.pipeline import codec
from app.pipeline.ingest import Outbox


def router() -> Router:
    engine = QuotaEngine(EngineSettings())
    for record in CONFIGS:
        update = parse_event({"type": "quota_config", "v": 1, "ts": T0, **record})
        assert isinstance(update, ConfigUpdate)
        engine.process(update)
    return Router(engine, 8)


def route_record(value: bytes, clock: StreamClock, r: Router, appended_ms: int,
                 outbox: Outbox) -> list[tuple[str, Any]]:
    """The ingest's work on one source record: its samples to the outbox, its dead letters back."""
    decoded = decode_source(value, appended_ms, clock)
    outbox.add(decoded, r)
    return [(reason, raw) for _, reason, raw in decoded.dead]


def request(ts: int, **extra: Any) -> dict[str, Any]:
    return {"type": "request", "v": 1, "ts": ts, "user": "alice", "client_id": "app-1",
            "api": "Produce", "bytes": 100, **extra}


def test_samples_and_dead_letters_of_a_batch() -> None:
    bad = request(T0, bytes=-1)
    config = {"type": "quota_config", "v": 1, "ts": T0, "entity": {"user": "x"},
              "quotas": {"producer_byte_rate": 1000}}
    mutation = {"type": "mutation", "v": 1, "ts": T0 + 2, "user": "alice", "client_id": "app-1",
                "api": "CreateTopics", "api_version": 7, "partitions": 3}
    batch = {"type": "batch", "v": 1, "broker": 1,
             "events": [request(T0), bad, request(T0 + 1, gateway=3, thread_time_ms=0.25),
                        mutation]}
    outbox = Outbox()
    clock = StreamClock()
    r = router()
    dead = route_record(orjson.dumps(batch), clock, r, 42, outbox)
    assert [raw for _, raw in dead] == [bad] and "bytes" in dead[0][0]
    dead = route_record(orjson.dumps(config), clock, r, 43, outbox)
    assert [reason for reason, _ in dead] == ["quota_config records belong on the config topic"]
    assert route_record(b"{not json", clock, r, 44, outbox)[0][0].startswith("not JSON")
    assert route_record(None, clock, r, 45, outbox)[0][0] == "not JSON: empty record value"  # type: ignore[arg-type]
    assert outbox.size == 3 and outbox.counts == {"request": 2, "mutation": 1}
    requests, rows, held, counts = outbox.take()
    assert outbox.size == 0 and not outbox.requests and held == [] and counts["request"] == 2
    decoded = [codec.decode(codec.encode_requests(b)) for b in requests.values()]
    events = [(b.event(i), b.arrival[i], b.only[i]) for b, _ in decoded if b for i in range(len(b))]
    assert [(e.ts, e.broker, e.gateway, e.thread_ms, arrival, only)
            for e, arrival, only in events] == [(T0, 1, -1, 0.0, 42, 0), (T0 + 1, 1, 3, 0.25, 42, 0)]
    (only_rows,) = rows.values()
    _, back = codec.decode(codec.encode_rows(only_rows))
    event, arrival = codec.row_event(back[0])
    assert isinstance(event, MutationEvent) and (event.ts, event.partitions, arrival) == (T0 + 2, 3, 42)


def test_clock_skew_is_a_dead_letter() -> None:
    outbox = Outbox()
    clock = StreamClock()
    r = router()
    assert route_record(orjson.dumps({**request(T0), "broker": 1}), clock, r, 0, outbox) == []
    far = {**request(T0 + 10 * 86_400_000), "broker": 1}
    dead = route_record(orjson.dumps(far), clock, r, 0, outbox)
    assert len(dead) == 1 and dead[0][1] == far and outbox.size == 1


def test_latest_time_and_arrival_of_internal_records() -> None:
    outbox = Outbox()
    r = router()
    route_record(orjson.dumps({"type": "batch", "v": 1, "broker": 2, "events": [
        request(T0 + 5), request(T0 + 3)]}), StreamClock(), r, 900, outbox)
    requests, _, _, _ = outbox.take()
    (batch,) = requests.values()
    assert codec.latest(*codec.decode(codec.encode_requests(batch))) == (T0 + 5, 900)
    assert codec.latest(None, []) == (-1, -1)
