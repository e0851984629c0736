"""The publisher's records: request batches as columnar records (QS_EVENT_FORMAT=columnar) or
JSON, connections and mutations as JSON; the workers' intake reads back the same events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.intake.clock import StreamClock
from app.intake.records import decode_source
from app.usage.publisher import EventPublisher
from app.usage.recorder import UsageRecorder

T0 = 1_763_800_000_000
TOPICS = {"request": "req", "connection": "conn", "mutation": "mut"}


class Producer:
    """What the publisher uses of an AIOKafkaProducer, keeping what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, int]] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return {0, 1, 2}

    async def send(self, topic: str, value: bytes, key: bytes | None = None,
                   partition: int = 0) -> None:
        self.sent.append((topic, value, key, partition))


def recorded() -> UsageRecorder:
    rec = UsageRecorder(gateway=4)
    for i in range(5):
        rec.request(2, T0 + i, "PLAIN", "alice", "app", "10.0.0.1", "Produce", 9, 100 + i,
                    0.25, 0.0)
    rec.connection(2, T0 + 9, "PLAIN", "10.0.0.7")
    rec.mutation(2, T0 + 9, "alice", "app", "CreateTopics", 7, 3)
    return rec


def samples(values: list[bytes]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for value in values:
        decoded = decode_source(value, 0, StreamClock())
        assert not decoded.dead
        b = decoded.requests
        out += [(b.ts[i], b.broker[i], b.gateway[i], b.names[b.user[i]], b.bytes[i],
                 b.thread_ns[i]) for i in range(len(b))]
        out += [(e.type, e.ts, e.broker) for e in decoded.others]
    return out


@pytest.mark.parametrize("columnar", [False, True])
async def test_request_batches_in_either_format_carry_the_same_events(columnar: bool) -> None:
    producer = Producer()
    sent = await EventPublisher(producer, TOPICS, columnar=columnar).send(  # type: ignore[arg-type]
        recorded().flush())
    assert sent == len(producer.sent) == 3
    by_topic = {topic: value for topic, value, _, _ in producer.sent}
    assert by_topic["req"].startswith(b"QSCB") is columnar
    assert orjson.loads(by_topic["conn"])["type"] == "batch"  # others stay JSON
    json_twin = Producer()
    await EventPublisher(json_twin, TOPICS).send(recorded().flush())  # type: ignore[arg-type]
    assert samples([v for _, v, _, _ in producer.sent]) == samples(
        [v for _, v, _, _ in json_twin.sent])
    assert (T0 + 4, 2, 4, "alice", 104, 250_000) in samples([by_topic["req"]])
