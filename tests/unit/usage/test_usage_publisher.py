"""The recorder and publisher: a flush is one record per event kind, keyed by its source, within
the record size bound; requests as columns (columnar records with QS_EVENT_FORMAT=columnar, else
JSON), decoded by the workers' intake to the same events; what is dropped is counted by reason,
and a record the producer fails on loses nothing else."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from app.engine.events import MAX_NAME
from app.intake import columnar
from app.intake.records import decode_source
from app.usage.drops import BUFFER_FULL, SEND_FAILED, TOO_LARGE, Drops
from app.usage.names import charged_name
from app.usage.publisher import EventPublisher, Source
from app.usage.recorder import CONNECTION, MUTATION, REQUEST, UsageRecorder
from app.usage.records import RecordEncoder
from tests.unit.fake_producer import Producer

T0 = 1_763_800_000_000
TOPICS = {REQUEST: "req", CONNECTION: "conn", MUTATION: "mut"}
KIB = 1024


def publisher(producer: Producer, columnar_: bool = False, max_bytes: int = 512 * KIB,
              drops: Drops | None = None) -> EventPublisher:
    return EventPublisher(producer, TOPICS, RecordEncoder(columnar_, max_bytes, drops))  # type: ignore[arg-type]


def flush_of(principals: int, per_principal: int = 3, client_id: str = "app") -> UsageRecorder:
    """One flush of a gateway: `principals` users on two brokers, a connection and a mutation."""
    rec = UsageRecorder(gateway=4)
    for i in range(per_principal):
        for p in range(principals):
            rec.request(1 + p % 2, T0 + i, "PLAIN", f"user-{p}", client_id, "10.0.0.1",
                        "Produce" if p % 3 else "Fetch", 100 + p, 0.25 * (i + 1), 0.0,
                        throttle_ms=(p % 4) * 100 * i)
    rec.connection(2, T0 + 3, "PLAIN", "10.0.0.7")
    rec.mutation(2, T0 + 4, "user-0", client_id, "CreateTopics", 7, 3)
    return rec


def decoded(values: list[bytes]) -> list[tuple[Any, ...]]:
    """Every sample the workers' intake takes from these record values, in order."""
    out: list[tuple[Any, ...]] = []
    for value in values:
        d = decode_source(value, 0)
        assert not d.dead, d.dead
        b = d.requests
        out += [(b.ts[i], b.broker[i], b.gateway[i], b.names[b.listener[i]], b.names[b.user[i]],
                 b.names[b.client_id[i]], b.names[b.ip[i]], b.names[b.api[i]], b.bytes[i],
                 b.thread_ns[i], b.network_ns[i], b.exempt[i], b.count[i], b.throttle_ms[i])
                for i in range(len(b))]
        out += [(e.type, e.ts, e.broker, getattr(e, "partitions", None)) for e in d.others]
    return out


@pytest.mark.parametrize("columnar_", [False, True])
async def test_a_flush_of_many_principals_is_one_record_per_event_kind(columnar_: bool) -> None:
    producer = Producer()
    sent = await publisher(producer, columnar_).send(Source.gateway(4), flush_of(50).flush())
    assert sent == len(producer.sent) == 3
    assert [topic for topic, _, _, _ in producer.sent] == ["req", "conn", "mut"]
    assert {key for _, _, key, _ in producer.sent} == {b"gateway/4"}
    assert {partition for _, _, _, partition in producer.sent} == {4}  # 4 % 8 partitions
    request = producer.sent[0][1]
    assert request.startswith(columnar.MAGIC) is columnar_
    samples = decoded([request])
    assert len(samples) == 150 and len({s[4] for s in samples}) == 50  # every principal's
    assert {s[1] for s in samples} == {1, 2}  # and both brokers'


async def test_columnar_and_json_records_decode_to_the_same_events() -> None:
    as_json, as_columns = Producer(), Producer()
    await publisher(as_json).send(Source.gateway(4), flush_of(20).flush())
    await publisher(as_columns, columnar_=True).send(Source.gateway(4), flush_of(20).flush())
    assert not as_json.sent[0][1].startswith(columnar.MAGIC)
    assert decoded([v for _, v, _, _ in as_json.sent]) == decoded(
        [v for _, v, _, _ in as_columns.sent])
    assert (T0 + 2, 2, 4, "PLAIN", "user-1", "app", "10.0.0.1", "Produce", 101, 750_000, 0, 0,
            1, 200) in decoded([as_columns.sent[0][1]])


def test_the_old_per_principal_batch_and_the_one_record_per_flush_batch_are_both_accepted() -> None:
    """A third-party broker's records (a batch per principal, its `broker` the batch's) and
    the gateway's (every principal and broker in one batch, `broker` per event) are read alike."""
    events = [{"type": "request", "v": 1, "ts": T0 + i, "user": user, "client_id": "app",
               "api": "Produce", "bytes": 10 * i} for i, user in enumerate(["a", "b", "a"])]
    per_principal = [orjson.dumps({"type": "batch", "v": 1, "broker": 3,
                                   "events": [e for e in events if e["user"] == user]})
                     for user in ("a", "b")]
    one = orjson.dumps({"type": "batch", "v": 1, "events": [{**e, "broker": 3} for e in events]})
    assert sorted(decoded(per_principal)) == sorted(decoded([one]))
    assert len(decoded([one])) == 3


@pytest.mark.parametrize("columnar_", [False, True])
async def test_a_32_kib_client_id_is_charged_bounded_and_records_stay_within_the_bound(
        columnar_: bool) -> None:
    long_id = "x" * (32 * KIB - 1)
    rec = UsageRecorder()
    for p in range(400):  # each row with its own 1024-character name
        rec.request(1, T0, "PLAIN", f"user-{p}", long_id + str(p), "10.0.0.1", "Produce", 100,
                    0.5, 0.0)
    producer = Producer()
    drops = Drops()
    await publisher(producer, columnar_, max_bytes=64 * KIB, drops=drops).send(
        Source.broker(1), rec.flush())
    assert len(producer.sent) > 1
    assert all(len(value) <= 64 * KIB for _, value, _, _ in producer.sent)
    samples = decoded([value for _, value, _, _ in producer.sent])  # none dead-lettered
    assert sorted(s[4] for s in samples) == sorted(f"user-{p}" for p in range(400))
    assert {s[5] for s in samples} == {charged_name(long_id + str(p)) for p in range(400)}
    assert drops.take() == (dict.fromkeys((BUFFER_FULL, TOO_LARGE, SEND_FAILED), 0), 0)


def test_a_long_name_is_charged_under_one_bounded_form() -> None:
    name = "é" * 40_000
    bounded = charged_name(name)
    assert len(bounded) == MAX_NAME and bounded.startswith("é" * 952 + "#sha256:")
    assert charged_name(name) == bounded != charged_name(name[:-1] + "e")
    assert charged_name(bounded) == bounded and charged_name("app") == "app"


async def test_a_record_the_producer_fails_on_loses_only_its_own_events() -> None:
    rec = UsageRecorder()
    for p in range(300):
        rec.request(1, T0, "PLAIN", f"user-{p}", "c" * 1000, "10.0.0.1", "Produce", 100, 0.5,
                    0.0)
    rec.connection(1, T0, "PLAIN", "10.0.0.9")
    drops = Drops()
    producer = Producer(refuse=frozenset({1}), undelivered=frozenset({2}))
    pub = publisher(producer, max_bytes=100 * KIB, drops=drops)
    sent = await pub.send(Source.broker(1), rec.flush())
    await asyncio.gather(*producer.deliveries, return_exceptions=True)  # their callbacks ran
    records = producer.calls
    assert records >= 5  # 300 JSON events of ~1.2 KB in 100 KiB records, and the connection
    assert sent == records - 1  # the refused one; the undelivered one was queued
    delivered = decoded([value for _, value, _, _ in producer.sent])
    dropped, failed = drops.take()
    assert failed == 2 and dropped[BUFFER_FULL] == dropped[TOO_LARGE] == 0
    assert len(delivered) + dropped[SEND_FAILED] == 301  # every event sent or counted
    assert ("connection", T0, 1, None) in delivered  # after the failures, still sent


async def test_an_event_too_large_for_any_record_is_dropped_alone_and_counted() -> None:
    rec = UsageRecorder()
    rec.request(1, T0, "PLAIN", "u", "small", "10.0.0.1", "Produce", 1, 0.0, 0.0)
    rec.mutation(1, T0, "u" * 1024, "\x01" * 1024, "CreateTopics", 7, 1)  # escaped: 6 KiB
    rec.mutation(1, T0, "u", "small", "CreateTopics", 7, 2)
    drops = Drops()
    producer = Producer()
    await publisher(producer, max_bytes=4 * KIB, drops=drops).send(Source.broker(1), rec.flush())
    assert [(kind, partitions) for kind, _, _, partitions in
            decoded([v for _, v, _, _ in producer.sent])[1:]] == [("mutation", 2)]
    assert drops.take()[0][TOO_LARGE] == 1


def test_past_max_pending_events_are_dropped_as_buffer_full() -> None:
    drops = Drops()
    rec = UsageRecorder(max_pending=3, drops=drops)
    for i in range(5):
        rec.connection(1, T0 + i, "PLAIN", f"10.0.0.{i}")
    rec.request(1, T0, "PLAIN", "u", "c", "10.0.0.1", "Produce", 1, 0.0, 0.0)
    (span,) = rec.flush()
    assert len(span) == 3 and drops.take()[0][BUFFER_FULL] == 3


def test_aggregated_requests_are_one_row_per_principal_and_api_within_a_span() -> None:
    rec = UsageRecorder(aggregate=True, span_ms=5)
    for t in (0, 1, 4, 5, 9):  # spans [T0, T0+5) and [T0+5, T0+10)
        rec.request(1, T0 + t, "PLAIN", "alice", "app", "10.0.0.1", "Produce", 100, 0.25, 0.0)
    rec.request(1, T0 + 9, "PLAIN", "alice", "app", "10.0.0.1", "Fetch", 7, 0.0, 0.0)
    first, second = rec.flush()
    rows = first.requests
    assert (rows.ts, rows.count, rows.bytes, rows.thread_ns) == (
        [T0 + 4], [3], [300], [750_000])
    assert (second.requests.ts, second.requests.count) == ([T0 + 9, T0 + 9], [2, 1])
    assert rec.recorded == 6 and rec.flush() == []


def test_an_aggregated_row_answers_with_the_throttles_of_its_requests_summed_and_clamped() -> None:
    rec = UsageRecorder(aggregate=True, span_ms=1000)
    for ms in (0, 300, 2**31 - 1, 2**31 - 1, 50):
        rec.request(1, T0, "PLAIN", "alice", "app", "10.0.0.1", "Produce", 100, 0.0, 0.0,
                    throttle_ms=ms)
    rec.request(1, T0, "PLAIN", "bob", "app", "10.0.0.1", "Produce", 100, 0.0, 0.0,
                throttle_ms=2**33)
    (span,) = rec.flush()
    assert span.requests.throttle_ms == [2**32 - 1, 2**32 - 1]  # the column's most
    rec.request(1, T0, "PLAIN", "alice", "app", "10.0.0.1", "Produce", 100, 0.0, 0.0,
                throttle_ms=300)
    rec.request(1, T0, "PLAIN", "alice", "app", "10.0.0.1", "Produce", 100, 0.0, 0.0,
                throttle_ms=50)
    assert rec.flush()[0].requests.throttle_ms == [350]


@pytest.mark.parametrize("columnar_", [False, True])
def test_a_span_longer_than_the_flush_interval_is_never_one_record(columnar_: bool) -> None:
    """A publisher that fell behind (the producer blocked) still sends records of one flush
    interval each, in order."""
    rec = UsageRecorder(span_ms=5)
    for t in range(0, 50, 2):
        rec.request(1, T0 + t, "PLAIN", "alice", "app", "10.0.0.1", "Produce", 1, 0.0, 0.0)
    records = RecordEncoder(columnar_).records(rec.flush())
    spans = [[s[0] for s in decoded([r.value])] for r in records]
    assert len(records) == 9  # spans open at T0, T0+6, T0+12, ...: three events each
    assert all(max(ts) - min(ts) < 5 for ts in spans)
    assert [ts for span in spans for ts in span] == list(range(T0, T0 + 50, 2))


def test_sources_are_keyed_and_spread_over_the_partitions() -> None:
    assert Source.gateway(3) == (b"gateway/3", 3)
    assert Source.broker(2) == (b"broker/2", 2)
    unnamed = Source.gateway(None)
    assert unnamed.key == f"gateway/unnamed-{unnamed.number}".encode()
    assert sorted(Source.gateway(g).number % 8 for g in range(16)) == sorted(list(range(8)) * 2)
