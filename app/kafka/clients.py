"""Short-lived aiokafka clients for the workers, the gateway and the tools, and the questions
asked through them.

- `consumer` is a started group-less consumer, `producer` a started producer (acks=all), each
  an async context manager, both connected with the `KafkaSecurity` their caller gives
  (plaintext, Kafka clients' default, unless given).
- `topic_exists` / `partitions_of` ask for the cluster's topic list without naming a topic: a
  cluster with `auto.create.topics.enable` creates a topic a client merely asks about.
- `quiet_client_logs`: a tool reports a connection failure once, in one line.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from app.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = ["REQUEST_TIMEOUT_MS", "TopicMissing", "consumer", "partitions_of", "producer",
           "quiet_client_logs", "topic_exists"]

REQUEST_TIMEOUT_MS = 15_000


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
async def consumer(bootstrap: str, *, security: KafkaSecurity = PLAINTEXT, **options: Any
                   ) -> AsyncIterator[AIOKafkaConsumer]:
    """A started group-less consumer (no commits, nothing subscribed yet)."""
    kwargs: dict[str, Any] = {"enable_auto_commit": False, "auto_offset_reset": "earliest",
                              "request_timeout_ms": REQUEST_TIMEOUT_MS, **options}
    kwargs["group_id"] = None
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, **security.aiokafka(), **kwargs)
    try:
        await c.start()
        yield c
    finally:
        await c.stop()


@contextlib.asynccontextmanager
async def producer(bootstrap: str, *, security: KafkaSecurity = PLAINTEXT, **options: Any
                   ) -> AsyncIterator[AIOKafkaProducer]:
    """A started producer (acks=all) that is flushed and stopped on exit."""
    kwargs: dict[str, Any] = {"acks": "all", "linger_ms": 5,
                              "request_timeout_ms": REQUEST_TIMEOUT_MS, **options}
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, **security.aiokafka(), **kwargs)
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
