"""Where a partition ends, asked two ways.

- `end_offsets`: each partition's end (ListOffsets LATEST), from a short-lived consumer; what a
  reader that starts reads up to.
- `read_to_highwater`: whether a following consumer has read every partition to the high
  watermark its last Fetch reported, the end as of a fetch, not of a ListOffsets asked before
  it (the config follower's watermark and the directive subscriber's readiness).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable
from typing import Any, TypeVar, cast

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from app.kafka.clients import consumer
from app.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = ["EndOffsetError", "end_offsets", "read_to_highwater"]


class EndOffsetError(RuntimeError):
    """A partition's end offset could not be read in time (no such topic, no leader, no
    broker)."""


K = TypeVar("K", bound=Hashable)


async def end_offsets(bootstrap: str, partitions: Iterable[K], *,
                      security: KafkaSecurity = PLAINTEXT, timeout: float = 15.0) -> dict[K, int]:
    """Each partition's end offset (the next offset to be written), keyed by the objects
    given: `(topic, partition)` pairs as aiokafka `TopicPartition`, Faust `TP` or tuples.
    Raises `EndOffsetError` if they cannot be read within `timeout` seconds."""
    keys = list(dict.fromkeys(partitions))
    if not keys:
        return {}
    by_tp = {TopicPartition(cast(Any, k)[0], int(cast(Any, k)[1])): k for k in keys}
    try:
        async with asyncio.timeout(timeout), consumer(
                bootstrap, security=security, request_timeout_ms=max(1000, int(timeout * 1000))) as c:
            ends = await c.end_offsets(list(by_tp))
    except (TimeoutError, KafkaError) as exc:
        raise EndOffsetError(f"could not read the end offsets of "
                             f"{', '.join(f'{tp.topic}/{tp.partition}' for tp in by_tp)} from "
                             f"{bootstrap} within {timeout:g} s ({type(exc).__name__}): does "
                             "every topic exist? is the cluster up?") from None
    return {key: int(ends[tp]) for tp, key in by_tp.items()}


async def read_to_highwater(consumer: AIOKafkaConsumer, partitions: Iterable[TopicPartition]
                            ) -> bool:
    """True once the consumer's position in every partition has reached the high watermark of
    that partition's last Fetch (False while one has had no Fetch answer yet)."""
    for tp in partitions:
        highwater = consumer.highwater(tp)
        if highwater is None or await consumer.position(tp) < highwater:
            return False
    return True
