"""Small Kafka helpers the workers, the gateway and the tools share.

- `topic_exists` / `partitions_of` ask for the cluster's topic list without naming a topic: a
  cluster with `auto.create.topics.enable` creates a topic a client merely asks about.
- `end_offsets` is each partition's end (ListOffsets LATEST) from a short-lived consumer.
- `read_topic` reads every partition of a topic from the beginning to its end, without a
  consumer group, so a tool can rebuild state from a compacted topic and stop.
- `producer` is an aiokafka producer as an async context manager (acks=all).
- `ensure_topics` creates the named product topics that are missing, with the partition count
  and configs `topic_specs` gives them, and leaves existing ones alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import AsyncIterator, Hashable, Iterable, Mapping
from typing import Any, TypeVar, cast

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from app.kafka_security import client_options

__all__ = ["EndOffsetError", "TopicMissing", "consumer", "end_offsets", "ensure_topics",
           "partitions_of", "producer", "quiet_client_logs", "read_topic", "topic_exists"]

REQUEST_TIMEOUT_MS = 15_000


class EndOffsetError(RuntimeError):
    """A partition's end offset could not be read in time (no such topic, no leader, no
    broker)."""


class TopicMissing(LookupError):
    """The topic does not exist on the cluster (and was deliberately not auto-created)."""

    def __init__(self, topic: str) -> None:
        super().__init__(topic)
        self.topic = topic


def quiet_client_logs() -> None:
    """aiokafka logs connection failures itself; a tool reports them once, in one line."""
    for name in ("aiokafka", "kafka"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


@contextlib.asynccontextmanager
async def consumer(bootstrap: str, **options: Any) -> AsyncIterator[AIOKafkaConsumer]:
    """A started group-less consumer (no commits, nothing subscribed yet)."""
    kwargs: dict[str, Any] = {"enable_auto_commit": False, "auto_offset_reset": "earliest",
                              "request_timeout_ms": REQUEST_TIMEOUT_MS, **options}
    kwargs["group_id"] = None
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(), **kwargs)
    try:
        await c.start()
        yield c
    finally:
        await c.stop()


@contextlib.asynccontextmanager
async def producer(bootstrap: str, **options: Any) -> AsyncIterator[AIOKafkaProducer]:
    """A started producer (acks=all) that is flushed and stopped on exit."""
    kwargs: dict[str, Any] = {"acks": "all", "linger_ms": 5,
                              "request_timeout_ms": REQUEST_TIMEOUT_MS, **options}
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_options(), **kwargs)
    try:
        await p.start()
        yield p
    finally:
        await p.stop()


async def topic_exists(c: AIOKafkaConsumer, topic: str) -> bool:
    """True if the cluster has `topic`; asks for all topics, so nothing is auto-created."""
    return topic in await c.topics()


async def partitions_of(c: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """The topic's partitions; raises `TopicMissing` instead of auto-creating it.

    Read from one all-topics Metadata answer: `AIOKafkaConsumer.topics()` fetches that answer
    but leaves the consumer's own metadata cache as it was, so `partitions_for_topic` may not
    know a topic `topics()` just listed (a fresh consumer on Apache Kafka does not)."""
    cluster = await c._client.fetch_all_metadata()
    partitions = cluster.partitions_for_topic(topic)
    if not partitions:
        raise TopicMissing(topic)
    return [TopicPartition(topic, p) for p in sorted(partitions)]


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


async def read_topic(bootstrap: str, topic: str, *, timeout: float = 30.0) -> list[ConsumerRecord]:
    """Every record of `topic`, from the beginning to the end, then stop.

    Records of one partition keep their order; partitions are merged by record timestamp
    (a merge never reorders within a partition). Raises `TopicMissing` if there is no such
    topic, `EndOffsetError` if the ends cannot be read within `timeout`.
    """
    async with consumer(bootstrap) as c:
        tps = await partitions_of(c, topic)
        ends = await end_offsets(bootstrap, tps, timeout=timeout)
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


async def ensure_topics(bootstrap: str, specs: Iterable[tuple[str, int, Mapping[str, str] | None]]) -> list[str]:
    """Create the given topics if missing (existing ones are left as they are)."""
    from app.broker import create_topics

    return await create_topics(bootstrap, list(specs), check_partitions=False,
                               timeout=REQUEST_TIMEOUT_MS / 1000)
