"""The ingest's record handling: good samples go to the outbox by route, the rest are dead
letters; the internal records carry them to the aggregate unchanged."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson

from app.audit.synth import CONFIGS, T0
from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import MutationEvent, parse_event
from app.intake.clock import StreamClock
from app.intake.records import decode_source
from app.intake.routes import Router
from app.intake.stream import HOLD_MS, StreamIntake
from app.pipeline import codec
from app.pipeline.ingest import Outbox
from app.pipeline.metrics import WorkerMetrics
from app.pipeline.worker import QUIET_MARGIN_MS, Worker


def router() -> Router:
    engine = QuotaEngine(EngineSettings())
    for record in CONFIGS:
        update = parse_event({"type": "quota_config", "v": 1, "ts": T0, **record})
        assert isinstance(update, ConfigUpdate)
        engine.process(update)
    return Router(engine, 8)


def route_record(value: bytes, intake: StreamIntake[None], r: Router, appended_ms: int,
                 outbox: Outbox) -> list[tuple[str, Any]]:
    """The ingest's work on one source record: the records its stream clock lets go (itself
    unless held) have their samples put in the outbox and their dead letters returned."""
    dead = []
    for decoded, _ in intake.offer(decode_source(value, appended_ms), None):
        outbox.add(decoded, r)
        dead += [(reason, raw) for _, reason, raw in decoded.dead]
    return dead


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
    intake: StreamIntake[None] = StreamIntake(StreamClock())
    r = router()
    dead = route_record(orjson.dumps(batch), intake, r, 42, outbox)
    assert [raw for _, raw in dead] == [bad] and "bytes" in dead[0][0]
    dead = route_record(orjson.dumps(config), intake, r, 43, outbox)
    assert [reason for reason, _ in dead] == ["quota_config records belong on the config topic"]
    assert route_record(b"{not json", intake, r, 44, outbox)[0][0].startswith("not JSON")
    assert route_record(None, intake, r, 45, outbox)[0][0] == "not JSON: empty record value"  # type: ignore[arg-type]
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
    intake: StreamIntake[None] = StreamIntake(StreamClock())
    r = router()
    agreeing = {"type": "batch", "v": 1, "broker": 1,
                "events": [request(T0), request(T0 + 1), request(T0 + 2)]}
    assert route_record(orjson.dumps(agreeing), intake, r, 0, outbox) == []
    far = {**request(T0 + 10 * 86_400_000), "broker": 1}
    dead = route_record(orjson.dumps(far), intake, r, 0, outbox)
    assert len(dead) == 1 and dead[0][1] == far and outbox.size == 3


def test_a_junk_first_record_is_held_and_dead_lettered_with_the_records_that_settle_it() -> None:
    """A stream's first record has nothing to be judged by: it waits, out of the outbox (so
    unacked), until its stream agrees, then leaves before them, refused alone."""
    outbox = Outbox()
    intake: StreamIntake[None] = StreamIntake(StreamClock())
    r = router()
    junk = {**request(0), "broker": 1}
    assert route_record(orjson.dumps(junk), intake, r, 0, outbox) == []
    assert outbox.size == 0 and len(intake.held) == 1
    assert route_record(b"{not json", intake, r, 1, outbox) == []  # waits behind it
    good = [orjson.dumps({**request(T0 + i), "broker": 1}) for i in range(3)]
    assert route_record(good[0], intake, r, 2, outbox) == []
    assert route_record(good[1], intake, r, 3, outbox) == []
    dead = route_record(good[2], intake, r, 4, outbox)
    assert [raw for _, raw in dead] == [junk, b"{not json"]
    assert "from the stream time" in dead[0][0] and outbox.size == 3 and not intake.held


def test_latest_time_and_arrival_of_internal_records() -> None:
    outbox = Outbox()
    r = router()
    route_record(orjson.dumps({"type": "batch", "v": 1, "broker": 2, "events": [
        request(T0 + 5), request(T0 + 3), request(T0 + 4)]}), StreamIntake(StreamClock()), r, 900,
        outbox)
    requests, _, _, _ = outbox.take()
    (batch,) = requests.values()
    assert codec.latest(*codec.decode(codec.encode_requests(batch))) == (T0 + 5, 900)
    assert codec.latest(None, []) == (-1, -1)


class QuietWorker:
    """The worker's ingest state and its own settling, emitting and sending code, with the
    samples topic, the dead-letter topic and the config follower recorded instead. It holds
    no windows: every sample goes to the samples topic."""

    settle_quiet: Any = Worker.settle_quiet
    emit: Any = Worker.emit
    send_outbox: Any = Worker.send_outbox

    def __init__(self) -> None:
        self.intake_lock = asyncio.Lock()
        self.state_lock = asyncio.Lock()
        self.streams: dict[tuple[str, int], StreamIntake[Any]] = {}
        self.outbox = Outbox()
        self.router = router()
        self.samples_name = "samples"
        self.follower = SimpleNamespace(released=lambda arrival, time_ms: None)
        self.sent: list[tuple[int, int]] = []  # (samples partition, samples)
        self.dead: list[str] = []
        self.behind = True  # records of the partition fetched and not taken yet
        self.metrics = WorkerMetrics()

    def caught_up(self, tp: Any) -> bool:
        return not self.behind

    def holding(self, partitions: Any) -> list[int]:
        return []

    async def produce(self, topic: str, value: bytes, key: bytes | None = None,
                      partition: int | None = None) -> None:
        batch, rows = codec.decode(value)
        assert partition is not None
        self.sent.append((partition, len(batch) if batch is not None else len(rows)))

    async def send_deadletter(self, reason: str, raw: Any, source: str,
                              key: bytes | None = None) -> None:
        self.dead.append(reason)


def test_a_quiet_partitions_held_records_are_judged_and_sent_on_within_seconds() -> None:
    """A junk first record and a good one wait for agreement; no record follows. The flush
    loop's `settle_quiet` leaves them held while later records of the partition wait to be
    taken, or until HOLD_MS and the margin passed since the first arrived; then it judges
    them (the junk dead-lettered, the good samples sent to the samples topic) and acks both."""
    worker = QuietWorker()
    intake: StreamIntake[Any] = StreamIntake(StreamClock())
    worker.streams[("quota.events.request", 0)] = intake
    acked: list[int] = []
    arrival = T0 + 1000
    for offset, ts in enumerate((0, T0 + 900)):
        event = SimpleNamespace(key=None, ack=lambda o=offset: acked.append(o),
                                message=SimpleNamespace(topic="quota.events.request",
                                                        partition=0, offset=offset))
        value = orjson.dumps({"type": "batch", "v": 1, "broker": 1,
                              "events": [request(ts), request(ts + 1)]})
        assert intake.offer(decode_source(value, arrival + offset), event) == []
    bound = arrival + HOLD_MS + QUIET_MARGIN_MS
    asyncio.run(worker.settle_quiet(bound + 60_000))
    assert intake.held and not worker.sent and not acked  # the next records may say otherwise
    worker.behind = False
    asyncio.run(worker.settle_quiet(bound))
    assert intake.held and not worker.sent and not acked
    asyncio.run(worker.settle_quiet(bound + 1))
    assert not intake.held and acked == [0, 1]
    assert sum(n for _, n in worker.sent) == 2
    assert len(worker.dead) == 2 and all("from the stream time" in r for r in worker.dead)
    assert worker.metrics.registry.get_sample_value("quota_streams_samples_path_total",
                                                    {"path": "rekeyed"}) == 2
