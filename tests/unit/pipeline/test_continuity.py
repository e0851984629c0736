"""Offset continuity (`app.pipeline.continuity`), and the seek to the committed offsets that
moves every input partition (`faust_patches` patch 3)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from app.pipeline.continuity import Continuity, Verdict
from app.pipeline.faust_patches import _seek_to_committed

TP = ("samples", 1)


def judged(continuity: Continuity, offsets: list[int], committed: int | None,
           now: float = 0.0) -> list[Verdict]:
    return [continuity.judge(TP, offset, committed, now) for offset in offsets]


def test_consecutive_records_from_the_committed_offset_are_processed() -> None:
    continuity = Continuity()
    assert judged(continuity, [23, 24, 25], committed=23) == [Verdict.PROCESS] * 3
    assert continuity.expected(TP) == 26


def test_a_partition_without_a_committed_offset_starts_at_its_first_record() -> None:
    continuity = Continuity()
    assert judged(continuity, [40, 41], committed=None) == [Verdict.PROCESS] * 2


def test_records_skipped_by_the_consumer_are_sought_back_and_read_in_order() -> None:
    """The consumer delivered 79 first although the group had committed 2: seek back to 2,
    drop what is still in flight past it, then read 2, 3, ... as delivered again."""
    continuity = Continuity()
    assert continuity.judge(TP, 79, 2, now=0.0) is Verdict.GAP
    assert continuity.expected(TP) == 2
    assert judged(continuity, [80, 81], committed=2, now=0.1) == [Verdict.REWINDING] * 2
    assert judged(continuity, [2, 3, 4], committed=2, now=0.2) == [Verdict.PROCESS] * 3
    assert continuity.expected(TP) == 5


def test_a_gap_in_the_middle_of_an_assignment_is_sought_back_to_the_next_unprocessed() -> None:
    continuity = Continuity()
    assert judged(continuity, [10, 11, 15], committed=10) == [
        Verdict.PROCESS, Verdict.PROCESS, Verdict.GAP]
    assert continuity.expected(TP) == 12


def test_a_record_delivered_again_after_it_was_processed_is_dropped() -> None:
    continuity = Continuity()
    judged(continuity, [5, 6, 7], committed=5)
    assert judged(continuity, [5, 6, 7, 8], committed=5) == [Verdict.DUPLICATE] * 3 + [
        Verdict.PROCESS]


def test_a_seek_that_brings_nothing_is_asked_again_then_given_up_and_counted() -> None:
    continuity = Continuity(reseek_s=5.0, max_seeks=2)
    assert continuity.judge(TP, 9, 3, now=0.0) is Verdict.GAP
    assert continuity.judge(TP, 9, 3, now=4.9) is Verdict.REWINDING
    assert continuity.judge(TP, 9, 3, now=5.0) is Verdict.GAP
    assert continuity.judge(TP, 9, 3, now=9.0) is Verdict.REWINDING
    assert continuity.given_up == 0
    assert continuity.judge(TP, 9, 3, now=10.0) is Verdict.PROCESS
    assert continuity.given_up == 6  # offsets 3..8
    assert continuity.judge(TP, 10, 3, now=10.0) is Verdict.PROCESS


def test_a_revoked_partition_is_judged_from_its_committed_offset_again() -> None:
    continuity = Continuity()
    judged(continuity, [5, 6, 7], committed=5)
    continuity.forget(TP)
    assert continuity.judge(TP, 6, 6, now=0.0) is Verdict.PROCESS


class FakeConsumer:
    """aiokafka's seeks as `AIOKafkaConsumer` offers them, recorded."""

    def __init__(self, committed: dict[TopicPartition, int | None]) -> None:
        self.committed = committed
        self.to_beginning: list[TopicPartition] = []

    async def seek_to_committed(self) -> dict[TopicPartition, int | None]:
        return dict(self.committed)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self.to_beginning.extend(partitions)


def test_the_seek_to_committed_offsets_moves_input_partitions_without_one_to_their_start() -> None:
    source, never, zero = (TopicPartition("app.request", 0), TopicPartition("app-samples", 1),
                           TopicPartition("app-samples", 0))
    changelog = TopicPartition("app-entity-windows-changelog", 1)
    consumer = FakeConsumer({source: 231, never: None, zero: 0, changelog: None})

    async def call_thread(fn: Any) -> Any:
        return await fn()

    thread = SimpleNamespace(
        _ensure_consumer=lambda: consumer, call_thread=call_thread,
        app=SimpleNamespace(tables=SimpleNamespace(changelog_topics={changelog.topic})))
    offsets = asyncio.run(_seek_to_committed(thread))  # type: ignore[arg-type]
    assert offsets[source] == 231
    assert sorted(consumer.to_beginning) == sorted([never, zero])


def test_a_seek_back_that_brings_nothing_is_asked_again_on_the_flush_cadence() -> None:
    continuity = Continuity(reseek_s=5.0)
    assert continuity.judge(TP, 9, 3, now=0.0) is Verdict.GAP
    assert continuity.due(4.9) == []
    assert continuity.due(5.0) == [(TP, 3)]
    assert continuity.due(6.0) == []
    assert continuity.due(10.0) == [(TP, 3)]
    assert continuity.judge(TP, 3, 3, now=10.5) is Verdict.PROCESS
    assert continuity.due(20.0) == []


def test_a_seek_back_is_asked_again_at_most_max_seeks_times_in_all() -> None:
    continuity = Continuity(reseek_s=5.0, max_seeks=3)
    continuity.judge(TP, 9, 3, now=0.0)
    asked = [continuity.due(t) for t in (5.0, 10.0, 15.0, 20.0)]
    assert asked == [[(TP, 3)], [(TP, 3)], [], []]
