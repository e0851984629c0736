"""A whole topic read once: every partition from the beginning to its end, without a consumer
group, so a tool can rebuild state from a compacted topic and stop."""

from __future__ import annotations

import asyncio
import heapq

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from app.kafka.clients import consumer, partitions_of
from app.kafka.offsets import end_offsets
from app.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = ["read_topic"]


async def read_topic(bootstrap: str, topic: str, *, security: KafkaSecurity = PLAINTEXT,
                     timeout: float = 30.0) -> list[ConsumerRecord]:
    """Every record of `topic`, from the beginning to the end, then stop.

    Records of one partition keep their order; partitions are merged by record timestamp
    (a merge never reorders within a partition). Raises `TopicMissing` if there is no such
    topic, `EndOffsetError` if the ends cannot be read within `timeout`.
    """
    async with consumer(bootstrap, security=security) as c:
        tps = await partitions_of(c, topic)
        ends = await end_offsets(bootstrap, tps, security=security, timeout=timeout)
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        per_partition: dict[TopicPartition, list[ConsumerRecord]] = {tp: [] for tp in tps}
        pending = {tp for tp in tps if ends[tp] > 0}
        pending = {tp for tp in pending if await c.position(tp) < ends[tp]}
        async with asyncio.timeout(timeout):
            while pending:
                batches = await c.getmany(*pending, timeout_ms=200)
                for tp, records in batches.items():
                    per_partition[tp].extend(r for r in records if r.offset < ends[tp])
                pending = {tp for tp in pending if await c.position(tp) < ends[tp]}
    return list(heapq.merge(*per_partition.values(), key=lambda r: r.timestamp))
