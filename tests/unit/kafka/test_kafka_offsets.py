"""`read_to_highwater`: the end as a following consumer's last Fetch reported it, the check
the config follower's watermark and the directive subscriber's readiness both make."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition

from app.kafka.offsets import read_to_highwater


class _Fetched:
    """A consumer as far as the check reads it: per partition, the high watermark of its last
    Fetch (None: no answer yet) and the position."""

    def __init__(self, parts: dict[TopicPartition, tuple[int | None, int]]) -> None:
        self.parts = parts
        self.asked: list[TopicPartition] = []

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.parts[tp][0]

    async def position(self, tp: TopicPartition) -> int:
        self.asked.append(tp)
        return self.parts[tp][1]


A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def at_end(parts: dict[TopicPartition, tuple[int | None, int]]) -> bool:
    return asyncio.run(read_to_highwater(_Fetched(parts), list(parts)))  # type: ignore[arg-type]


def test_every_partition_must_reach_the_high_watermark_of_its_last_fetch() -> None:
    assert at_end({A: (5, 5), B: (0, 0)})
    assert not at_end({A: (5, 4), B: (0, 0)})  # records left to read
    assert not at_end({A: (5, 5), B: (None, 0)})  # no Fetch answer yet: not known to be read
    assert at_end({})


def test_a_partition_without_a_fetch_answer_is_not_asked_its_position() -> None:
    consumer: Any = _Fetched({A: (None, 0), B: (3, 3)})
    assert not asyncio.run(read_to_highwater(consumer, [A, B]))
    assert consumer.asked == []
