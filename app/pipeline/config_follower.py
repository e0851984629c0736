"""Every worker's copy of the compacted config topic (the "global table" of quota configs).

Each worker reads all partitions of the config topic without a consumer group, so every worker
holds every config; `ready` is set once it has read to the confirmed end, and the agents wait
for it, so no event is judged against a half-loaded config. Later records apply in place while
the worker runs: no restart is needed for a config change.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

from app.engine.configs import ConfigUpdate, QuotaConfigs
from app.engine.events import parse_event
from tables.recovery import confirmed_end_offsets

log = logging.getLogger(__name__)


class ConfigFollower:
    """Tails the config topic into a `QuotaConfigs`; bad records are counted and skipped."""

    def __init__(self, bootstrap: str, topic: str, configs: QuotaConfigs,
                 on_bad: Callable[[str, bytes], None] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.configs = configs
        self.on_bad = on_bad
        self.ready = asyncio.Event()
        self.applied = 0
        self.bad = 0
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                    group_id=None, auto_offset_reset="earliest")
        await consumer.start()
        self._consumer = consumer
        await consumer.topics()  # loads metadata, so partitions_for_topic answers
        partitions = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await confirmed_end_offsets(self.bootstrap, tps) if tps else {}
        self._task = asyncio.create_task(self._run(consumer, ends))

    async def _run(self, consumer: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> None:
        pending = {tp: end for tp, end in ends.items() if end > 0}
        if not pending:
            self.ready.set()
        while True:
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    self.apply(record.value or b"")
            if not self.ready.is_set():
                for tp in list(pending):
                    if await consumer.position(tp) >= pending[tp]:
                        del pending[tp]
                if not pending:
                    log.info("configs loaded: %d records applied, %d bad", self.applied, self.bad)
                    self.ready.set()

    def apply(self, value: bytes) -> None:
        try:
            item = parse_event(orjson.loads(value))
        except orjson.JSONDecodeError as exc:
            self._bad(f"not JSON: {exc}", value)
            return
        if not isinstance(item, ConfigUpdate):
            self._bad(getattr(item, "reason", "not a quota_config record"), value)
            return
        self.configs.apply(item)
        self.applied += 1

    def _bad(self, reason: str, value: bytes) -> None:
        self.bad += 1
        log.warning("bad config record: %s", reason)
        if self.on_bad is not None:
            self.on_bad(reason, value)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self._consumer is not None:
            await self._consumer.stop()
