"""Rebuilds a source partition's stream clock from the records before a worker's first one.

A `StreamClock`'s state is the timestamps of the stream's last few events, so a worker that
takes over a partition (a restart, a rebalance) reads those events back and judges the next
record exactly as a worker that had read the partition from its start would, instead of
starting from whatever record comes first (a junk timestamp there would cost good events).
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition

from app.intake.clock import CLOCK_SPAN
from app.intake.records import event_timestamps
from app.kafka.security import PLAINTEXT, KafkaSecurity

log = logging.getLogger(__name__)

#: Records read back per step, and at most in all, before giving up on filling the span.
STEP_RECORDS = 8
MAX_RECORDS = 256


class ClockSeeder:
    """Reads the event timestamps that precede an offset of a source partition."""

    def __init__(self, bootstrap: str, timeout_s: float = 10.0, *,
                 security: KafkaSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.timeout_s = timeout_s
        self.seeded = 0
        self.failed = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def timestamps(self, topic: str, partition: int, offset: int) -> list[int] | None:
        """The last CLOCK_SPAN event timestamps before `offset` (oldest first; fewer when the
        partition holds fewer), or None if the broker did not answer in time."""
        async with self._lock:  # one side consumer, one partition at a time
            try:
                found = await asyncio.wait_for(self._read_back(TopicPartition(topic, partition), offset),
                                               self.timeout_s)
            except Exception as exc:  # the clock then starts empty: say so, never stall
                self.failed += 1
                log.warning("%s/%d: could not read the records before offset %d to rebuild the "
                            "stream clock (%r); it starts empty", topic, partition, offset, exc)
                return None
            self.seeded += 1
            return found

    async def log_start(self, topic: str, partition: int) -> int | None:
        """The partition's first offset, or None if the broker did not answer in time: where a
        partition its group never committed is read from (the worker's offset continuity)."""
        tp = TopicPartition(topic, partition)
        async with self._lock:
            try:
                consumer = await asyncio.wait_for(self._started(), self.timeout_s)
                starts = await asyncio.wait_for(consumer.beginning_offsets([tp]), self.timeout_s)
            except Exception as exc:  # never stall the agent: its records are then taken
                self.failed += 1  # from the first one delivered
                log.warning("%s/%d: could not read the partition's first offset (%r); its "
                            "records are taken from the first one delivered", topic, partition,
                            exc)
                return None
            return int(starts[tp])

    async def _read_back(self, tp: TopicPartition, offset: int) -> list[int]:
        consumer = await self._started()
        consumer.assign([tp])
        low = (await consumer.beginning_offsets([tp]))[tp]
        found: list[int] = []
        end = offset
        while len(found) < CLOCK_SPAN and end > low and offset - end < MAX_RECORDS:
            start = max(low, end - STEP_RECORDS)
            consumer.seek(tp, start)
            chunk: list[int] = []
            while True:
                batch = await consumer.getone()
                if batch.offset >= end:
                    break
                chunk.extend(event_timestamps(batch.value))
                if batch.offset == end - 1:
                    break
            found = chunk + found
            end = start
        consumer.assign([])  # no fetching in the background until the next read-back
        return found[-CLOCK_SPAN:]

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                        enable_auto_commit=False, auto_offset_reset="earliest",
                                        **self.security.aiokafka())
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
