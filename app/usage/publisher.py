"""`EventPublisher`: a recorder's batches onto the event topics, merged per partition.

Each event lands on the partition of its contract key (murmur2, as any producer keyed by it would
pick), so one principal's events stay in order. The batches of one flush that share a (topic,
broker, partition) are merged into one record keyed by its first event's key, as `quota-streams
produce` keys a batch: a storm from many IPs is then a few records per flush instead of one per
IP, and the workers' cost is per record far more than per event. A record holds at most
`max_events` events, so it stays well under a broker's message size limit. With `columnar`,
request records are columnar batches (`app.intake.columnar`: about half the bytes, and what a
worker decodes fastest); connections and mutations stay JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from app.engine.events import RequestEvent, parse_event
from app.intake import columnar
from app.usage.recorder import REQUEST, Batch

_PARTITIONER = DefaultPartitioner()


class EventPublisher:
    """Sends batches with one producer; `topics` maps an event kind to its topic."""

    def __init__(self, producer: AIOKafkaProducer, topics: Mapping[str, str],
                 max_events: int = 2000, columnar: bool = False) -> None:
        self.producer = producer
        self.columnar = columnar
        self.topics = dict(topics)
        self.max_events = max_events
        self.records = 0
        self.events = 0
        self._partitions: dict[str, list[int]] = {}
        self._partition: dict[tuple[str, bytes], int] = {}

    async def _partition_of(self, topic: str, key: bytes) -> int:
        partition = self._partition.get((topic, key))
        if partition is None:
            parts = self._partitions.get(topic)
            if parts is None:
                parts = self._partitions[topic] = sorted(await self.producer.partitions_for(topic))
            if len(self._partition) >= 100_000:
                self._partition.clear()
            partition = self._partition[(topic, key)] = _PARTITIONER(key, parts, parts)
        return partition

    async def send(self, batches: Iterable[Batch]) -> int:
        """Queue the records on the producer (not waiting for acks); returns how many."""
        merged: dict[tuple[str, int, int], tuple[bytes, list[dict[str, Any]]]] = {}
        for kind, key, record in batches:
            topic = self.topics[kind]
            partition = await self._partition_of(topic, key)
            slot = merged.setdefault((topic, record["broker"], partition), (key, []))
            slot[1].extend(record["events"])
        sent = 0
        for (topic, broker, partition), (key, events) in merged.items():
            for start in range(0, len(events), self.max_events):
                chunk = events[start:start + self.max_events]
                value = self._encode(topic, broker, chunk)
                await self.producer.send(topic, value, key=key, partition=partition)
                sent += 1
                self.events += len(chunk)
        self.records += sent
        return sent

    def _encode(self, topic: str, broker: int, events: list[dict[str, Any]]) -> bytes:
        if self.columnar and topic == self.topics.get(REQUEST):
            parsed = [parse_event(e, broker) for e in events]
            if all(type(e) is RequestEvent for e in parsed):
                return columnar.encode_events(parsed)  # type: ignore[arg-type]
        return orjson.dumps({"type": "batch", "v": 1, "broker": broker, "events": events})
