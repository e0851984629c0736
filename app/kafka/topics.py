"""Topic creation for every component and tool: explicit partition counts and configs.

Every product topic is created explicitly *before* any client touches it: a cluster that
auto-creates topics would give it `num.partitions` and no compaction, and a Faust worker
crash-loops on `PartitionsMismatch` when a topic's partition count is not the one it expects.
`create_topics()` / `create_topics_sync()` do that idempotently and return once the new topics
are served; `ensure_topics()` creates the missing ones and leaves existing ones alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from app.kafka.security import PLAINTEXT, KafkaSecurity

__all__ = ["BrokerError", "TopicMismatchError", "TopicSpec", "create_topics",
           "create_topics_sync", "ensure_topics"]

#: (topic name, partition count, topic configs such as {"cleanup.policy": "compact"}).
TopicSpec = tuple[str, int, Mapping[str, str]]


class BrokerError(RuntimeError):
    """The cluster refused to create a topic; the message says which and why."""


class TopicMismatchError(RuntimeError):
    """A topic already exists with a partition count other than the one asked for."""


# -- topics -----------------------------------------------------------------------------------

_TOPIC_ALREADY_EXISTS = 36


async def create_topics(
    bootstrap: str,
    specs: Iterable[tuple[str, int, Mapping[str, str] | None]],
    *,
    security: KafkaSecurity = PLAINTEXT,
    replication_factor: int = 1,
    check_partitions: bool = True,
    timeout: float = 30.0,
) -> list[str]:
    """Create topics with an explicit partition count and configs; return the names created.

    Idempotent: a topic that already exists is left as it is. With `check_partitions` (default)
    an existing topic with a *different* partition count raises `TopicMismatchError`, because a
    Faust worker would otherwise crash-loop later on `PartitionsMismatch` with a less clear
    message (the usual cause: a client touched the topic before it was created and the cluster
    auto-created it).
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import for_code

    wanted = {name: (int(parts), dict(configs or {})) for name, parts, configs in specs}
    if not wanted:
        return []
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000), **security.aiokafka()
    )
    created: list[str] = []
    async with asyncio.timeout(timeout):
        await admin.start()
        try:
            response = await admin.create_topics(
                [
                    NewTopic(name, parts, replication_factor, topic_configs=configs)
                    for name, (parts, configs) in wanted.items()
                ]
            )
            errors: list[str] = []
            for name, code, *rest in response.topic_errors:
                if code == 0:
                    created.append(name)
                elif code != _TOPIC_ALREADY_EXISTS:
                    message = rest[0] if rest and rest[0] else for_code(code).__name__
                    errors.append(f"{name}: {message} (error {code})")
            if errors:
                raise BrokerError("Could not create topics: " + "; ".join(errors))
            await _until_served(admin, {name: wanted[name][0] for name in created})
            existing = [name for name in wanted if name not in created]
            if check_partitions and existing:
                mismatched = []
                for meta in await admin.describe_topics(existing):
                    actual = len(meta["partitions"])
                    expected = wanted[meta["topic"]][0]
                    if actual != expected:
                        mismatched.append(f"{meta['topic']} has {actual}, wanted {expected}")
                if mismatched:
                    raise TopicMismatchError(
                        "Topics exist with the wrong partition count: "
                        + "; ".join(mismatched)
                        + ". Delete them and create the topics "
                        "before any client produces to or subscribes to them."
                    )
        finally:
            await admin.close()
    return created


async def _until_served(admin: Any, partitions: Mapping[str, int]) -> None:
    """Until every new topic's partitions all have a leader: a CreateTopics answer comes when
    the controller took the topic, before every broker serves it (a client that asks at once
    gets UNKNOWN_TOPIC_OR_PARTITION or no leader). Bounded by the caller's timeout."""
    pending = dict(partitions)
    while pending:
        for meta in await admin.describe_topics(list(pending)):
            parts = meta.get("partitions") or []
            if meta.get("error_code", 0) == 0 and len(parts) == pending.get(meta["topic"]) and \
                    all(p.get("leader", -1) >= 0 for p in parts):
                pending.pop(meta["topic"], None)
        if pending:
            await asyncio.sleep(0.05)


def create_topics_sync(
    bootstrap: str,
    specs: Iterable[tuple[str, int, Mapping[str, str] | None]],
    **kwargs: Any,
) -> list[str]:
    """`create_topics` for synchronous callers (CLI, fixtures); not for use inside a loop."""
    return asyncio.run(create_topics(bootstrap, list(specs), **kwargs))


async def ensure_topics(bootstrap: str, specs: Iterable[tuple[str, int, Mapping[str, str] | None]],
                        security: KafkaSecurity = PLAINTEXT) -> list[str]:
    """Create the given topics if missing (existing ones are left as they are)."""
    from app.kafka.clients import REQUEST_TIMEOUT_MS

    return await create_topics(bootstrap, list(specs), security=security, check_partitions=False,
                               timeout=REQUEST_TIMEOUT_MS / 1000)
