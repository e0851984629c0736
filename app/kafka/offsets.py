"""Each partition's end offset (ListOffsets LATEST), from a short-lived consumer."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable
from typing import Any, TypeVar, cast

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from app.kafka.clients import consumer

__all__ = ["EndOffsetError", "end_offsets"]


class EndOffsetError(RuntimeError):
    """A partition's end offset could not be read in time (no such topic, no leader, no
    broker)."""


K = TypeVar("K", bound=Hashable)


async def end_offsets(bootstrap: str, partitions: Iterable[K], *, timeout: float = 15.0
                      ) -> dict[K, int]:
    """Each partition's end offset (the next offset to be written), keyed by the objects
    given: `(topic, partition)` pairs as aiokafka `TopicPartition`, Faust `TP` or tuples.
    Raises `EndOffsetError` if they cannot be read within `timeout` seconds."""
    keys = list(dict.fromkeys(partitions))
    if not keys:
        return {}
    by_tp = {TopicPartition(cast(Any, k)[0], int(cast(Any, k)[1])): k for k in keys}
    try:
        async with asyncio.timeout(timeout), consumer(
                bootstrap, request_timeout_ms=max(1000, int(timeout * 1000))) as c:
            ends = await c.end_offsets(list(by_tp))
    except (TimeoutError, KafkaError) as exc:
        raise EndOffsetError(f"could not read the end offsets of "
                             f"{', '.join(f'{tp.topic}/{tp.partition}' for tp in by_tp)} from "
                             f"{bootstrap} within {timeout:g} s ({type(exc).__name__}): does "
                             "every topic exist? is the cluster up?") from None
    return {key: int(ends[tp]) for tp, key in by_tp.items()}
