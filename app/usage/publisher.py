"""`EventPublisher`: a recorder's flushes onto the event topics, keyed by their source.

Records are keyed by their **source**, the component that measured them (`gateway/<id>`,
`broker/<id>`: `app.contract.keys`), and all of one source's records of a topic go to one partition, `number %
partitions`: Kafka keeps a partition in the order it was written, and the producer sends one
batch per partition at a time, so a source's records reach the workers in the order it recorded
them, and each worker's stream clock (per source partition, `app.intake.clock`) follows a few
sources' time, not a mix of every source's. Sources with consecutive numbers (named gateways,
brokers) spread evenly over the partitions. The key also names the source in a dead letter.

A record the producer refuses, or fails to deliver, loses its own events only (counted:
`send_failed`); the rest of the flush is still sent. Records are not awaited: the producer
retries by itself, and a gateway never holds requests back for its usage events.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping
from functools import partial
from typing import NamedTuple

from aiokafka import AIOKafkaProducer

from app.contract.keys import broker_source, gateway_source
from app.errors import reason
from app.usage.drops import SEND_FAILED
from app.usage.recorder import Span
from app.usage.records import RecordEncoder

logger = logging.getLogger(__name__)


class Source(NamedTuple):
    """Who measured the events: the records' key, and the number that picks their partition."""

    key: bytes
    number: int

    @classmethod
    def gateway(cls, gateway_id: int | None) -> Source:
        """A gateway: `--gateway-id`, or for an unnamed one a random number drawn at start
        (its own partition for as long as it runs)."""
        if gateway_id is None:
            number = random.SystemRandom().randrange(2**31)
            return cls(gateway_source(None, number), number)
        return cls(gateway_source(gateway_id, gateway_id), gateway_id)

    @classmethod
    def broker(cls, broker_id: int) -> Source:
        return cls(broker_source(broker_id), broker_id)


class EventPublisher:
    """Sends flushes with one producer; `topics` maps an event kind to its topic."""

    def __init__(self, producer: AIOKafkaProducer, topics: Mapping[str, str],
                 encoder: RecordEncoder) -> None:
        self.producer = producer
        self.topics = dict(topics)
        self.encoder = encoder
        self.drops = encoder.drops
        self.records = 0
        self.events = 0
        self._partitions: dict[str, int] = {}

    async def _partition(self, topic: str, source: Source) -> int:
        count = self._partitions.get(topic)
        if count is None:
            count = self._partitions[topic] = len(await self.producer.partitions_for(topic))
        return source.number % count

    async def send(self, source: Source, spans: Iterable[Span]) -> int:
        """Queue a flush's records on the producer (not waiting for acks); returns how many
        were queued."""
        sent = 0
        for record in self.encoder.records(spans):
            topic = self.topics[record.kind]
            try:
                partition = await self._partition(topic, source)
                delivery = await self.producer.send(topic, record.value, key=source.key,
                                                    partition=partition)
            except Exception as exc:
                self._failed(record.events, exc)
                continue
            delivery.add_done_callback(partial(self._delivered, record.events))
            sent += 1
            self.events += record.events
        self.records += sent
        return sent

    def _delivered(self, events: int, delivery: asyncio.Future[object]) -> None:
        exc = asyncio.CancelledError() if delivery.cancelled() else delivery.exception()
        if exc is not None:
            self._failed(events, exc)

    def _failed(self, events: int, exc: BaseException) -> None:
        self.drops.add(SEND_FAILED, events)
        logger.warning("a usage record of %d events was not sent: %s", events, reason(exc))
