"""Topic names, partition counts and configs (the re-key partitioner is `routing.partition_for`)."""

from __future__ import annotations

from typing import Mapping

from app.settings import Settings

COMPACT = {"cleanup.policy": "compact"}
#: The config topic: compacted, and each record's timestamp (its arrival, which decides from
#: when a late config is in force: `app.engine.timeline`) is the broker's append time, which no
#: writer can set: a config re-sent later cannot pose as one that arrived when it was first
#: written.
CONFIGS = {**COMPACT, "message.timestamp.type": "LogAppendTime"}


def samples_topic(settings: Settings) -> str:
    """The internal topic events are re-keyed to, by resolved quota entity."""
    return f"{settings.app_id}-samples"


def topic_specs(settings: Settings) -> list[tuple[str, int, Mapping[str, str] | None]]:
    """Every topic the product uses, with the partition count it must have.

    Created explicitly at start: a cluster that auto-creates a topic gives it its default
    partition count, and a Faust worker crash-loops on a partition count it did not expect.
    """
    p = settings.partitions
    return [
        (settings.topic_request, p, None),
        (settings.topic_connection, p, None),
        (settings.topic_mutation, p, None),
        (settings.topic_configs, 1, CONFIGS),
        (settings.topic_directives, p, None),
        (settings.topic_deadletter, 1, None),
        (samples_topic(settings), p, None),
        (f"{settings.app_id}-entity-windows-changelog", p, COMPACT),
    ]
