"""Offset continuity (`app.pipeline.continuity`), the seek to the committed offsets that
moves every input partition (`faust_patches` patch 3), and commits that never pass a record in
flight (patch 6)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import faust
from aiokafka import TopicPartition
from faust.types import TP as FaustTP
from faust.types import Message

from app.pipeline.continuity import Continuity, Verdict, commit_point
from app.pipeline.faust_patches import _seek_to_committed, install

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


def test_the_commit_point_is_the_end_of_the_acked_run_from_the_committed_offset() -> None:
    assert commit_point([14, 15, 16], committed=14, pending=None) == 17
    assert commit_point([14, 15, 17], committed=14, pending=None) == 16
    # the record at the committed offset is in flight: nothing is committed past it
    assert commit_point([15, 16], committed=14, pending=14) is None
    assert commit_point([15, 16], committed=14, pending=None) is None
    # an in-flight record inside the run stops it too
    assert commit_point([14, 15, 16, 17], committed=14, pending=16) == 16


def test_without_a_committed_offset_nothing_passes_a_record_in_flight() -> None:
    assert commit_point([3, 4], committed=None, pending=None) == 5
    assert commit_point([3, 4], committed=None, pending=2) is None
    assert commit_point([3, 4, 5], committed=None, pending=5) == 5
    assert commit_point([], committed=None, pending=None) is None


def faust_consumer() -> Any:
    """A Faust consumer (never started) with the project's patches."""
    app = faust.App(f"commit-{id(object())}", broker="kafka://127.0.0.1:1")
    install(app)
    app.topics._acking_topics.add("request")  # as an agent reading it would
    return app.consumer


def delivered(consumer: Any, tp: FaustTP, offset: int) -> Any:
    message = Message(tp.topic, tp.partition, offset, 0.0, 0, None, None, b"", None)
    consumer.track_message(message)
    return message


def test_faust_commits_no_offset_past_a_record_still_in_flight() -> None:
    """A record whose windows wait for the flush, the next one acked at once (its samples all
    went to other workers): Faust alone would commit past the first."""
    consumer, tp = faust_consumer(), FaustTP("request", 0)
    consumer._committed_offset[tp] = 14
    waiting, sent = delivered(consumer, tp, 14), delivered(consumer, tp, 15)
    consumer.ack(sent)
    assert consumer._new_offset(tp) is None
    consumer.ack(waiting)
    assert consumer._new_offset(tp) == 16
    assert consumer._acked[tp] == []


def test_faust_fills_no_jump_in_offsets_as_if_it_were_acked() -> None:
    """Offsets seen to jump are records skipped (continuity reads them again), never acked."""
    consumer, tp = faust_consumer(), FaustTP("request", 0)
    consumer._committed_offset[tp] = 3
    for offset in (3, 4):
        consumer.ack(delivered(consumer, tp, offset))
    asyncio.run(consumer._add_gap(tp, 5, 9))
    consumer.ack(delivered(consumer, tp, 10))
    assert consumer._new_offset(tp) == 5
    assert consumer._new_offset(tp) is None
