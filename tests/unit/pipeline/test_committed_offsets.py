"""A real aiokafka consumer with the project's patches, on loopback sockets, against a fake node
that is the group's coordinator and the partition's leader (`faust_patches` patch 2).

While Kafka reloads a group's coordinator it answers OffsetFetch v3 with a group-level error and
no partitions at all (seen from Kafka 4.1.1 right after a node frozen past its broker session
resumed: NOT_COORDINATOR, then the offsets). Those answers must never be read as "no committed
offset": neither by `committed()` (Faust's seek to the committed offsets) nor by the fetcher
placing a newly assigned partition, either of which would reset to `earliest` and re-read what
the group had committed.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.group_coordinator import GroupCoordinator
from kio.schema.errors import ErrorCode

from app.gateway import apis
from app.gateway.frames import FrameError, request_header
from app.pipeline.faust_patches import CommittedOffsetsUnavailable, OffsetFetchGuard
from tests.unit.kafka_frames import NONE, metadata_response, ms, nested, response
from tests.unit.loopback import FakeBroker

OFFSET_FETCH, LIST_OFFSETS = 9, 2
NOT_COORDINATOR, LOADING = ErrorCode(16), ErrorCode(14)
TOPIC, COMMITTED, LOG_START = "t", 231, 17
TP = TopicPartition(TOPIC, 0)
#: the one version of each API the node offers (aiokafka picks it)
VERSIONS = {apis.API_VERSIONS: 0, apis.METADATA: 1, apis.FIND_COORDINATOR: 1, OFFSET_FETCH: 3,
            LIST_OFFSETS: 1}


class FakeCoordinator(FakeBroker):
    """Answers OffsetFetch with `answers` in turn, the last one from then on: a group-level
    error (an `ErrorCode`), or the partition's committed offset (-1: none); ListOffsets with
    LOG_START. Counts the requests of each API."""

    def __init__(self, answers: list[ErrorCode | int]) -> None:
        super().__init__()
        self.answers = itertools.chain(answers, itertools.repeat(answers[-1]))
        self.asked: Counter[int] = Counter()

    def _answer(self, payload: bytes) -> bytes | None:  # type: ignore[override]
        try:
            header = request_header(payload)
        except FrameError:
            return None
        key, corr = header.api_key, header.correlation_id
        if VERSIONS.get(key) != header.api_version:
            return None
        self.asked[key] += 1
        if key == apis.API_VERSIONS:
            version = nested(apis.API_VERSIONS, 0, "ApiVersion")
            return response(key, 0, corr, error_code=NONE, api_keys=tuple(
                version(api_key=k, min_version=v, max_version=v) for k, v in VERSIONS.items()))
        if key == apis.METADATA:
            return metadata_response(1, [(1, "127.0.0.1", self.port)], {TOPIC: 1}, corr)
        if key == apis.FIND_COORDINATOR:
            return response(key, 1, corr, throttle_time=ms(0), error_code=NONE,
                            error_message=None, node_id=1, host="127.0.0.1", port=self.port)
        if key == OFFSET_FETCH:
            return self._offset_fetch(corr, next(self.answers))
        part = nested(LIST_OFFSETS, 1, "ListOffsetsPartitionResponse")
        topic = nested(LIST_OFFSETS, 1, "ListOffsetsTopicResponse")
        return response(key, 1, corr, topics=(topic(name=TOPIC, partitions=(part(
            partition_index=0, error_code=NONE, timestamp=-1, offset=LOG_START),)),))

    @staticmethod
    def _offset_fetch(corr: int, answer: ErrorCode | int) -> bytes:
        if isinstance(answer, ErrorCode):
            return response(OFFSET_FETCH, 3, corr, throttle_time=ms(0), topics=(),
                            error_code=answer)
        part = nested(OFFSET_FETCH, 3, "OffsetFetchResponsePartition")
        topic = nested(OFFSET_FETCH, 3, "OffsetFetchResponseTopic")
        return response(OFFSET_FETCH, 3, corr, throttle_time=ms(0), error_code=NONE, topics=(
            topic(name=TOPIC, partitions=(part(partition_index=0, committed_offset=answer,
                                                metadata="", error_code=NONE),)),))


@pytest.fixture
def restore_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    """GroupCoordinator back as it was before the test installed a guard."""
    for name in ("_send_req", "_do_fetch_commit_offsets"):
        monkeypatch.setattr(GroupCoordinator, name, getattr(GroupCoordinator, name))


async def run(answers: list[ErrorCode | int], body: Callable[[AIOKafkaConsumer], Awaitable[None]],
              guard: Callable[[FakeCoordinator], OffsetFetchGuard] | None = None,
              ) -> FakeCoordinator:
    """`body(consumer)` against a node giving `answers`, under the guard made for it (default:
    the worker's)."""
    node = FakeCoordinator(answers)
    (guard(node) if guard else OffsetFetchGuard()).install()
    await node.start()
    consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{node.port}", group_id="g",
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                retry_backoff_ms=5)
    await consumer.start()
    try:
        async with asyncio.timeout(10):
            await body(consumer)
    finally:
        await consumer.stop()
        await node.stop()
    return node


async def test_committed_waits_out_a_coordinator_reload(restore_coordinator: None) -> None:
    async def body(consumer: AIOKafkaConsumer) -> None:
        assert await consumer.committed(TP) == COMMITTED

    node = await run([NOT_COORDINATOR, LOADING, NOT_COORDINATOR, COMMITTED], body)
    assert node.asked[OFFSET_FETCH] == 4
    assert node.asked[apis.FIND_COORDINATOR] >= 3  # looked up again after each NOT_COORDINATOR


async def test_an_assigned_partition_starts_at_the_committed_offset_through_a_reload(
        restore_coordinator: None) -> None:
    """The fetcher's own placement of a new assignment (paused, as Faust's are until its
    recovery seeks them): at the committed offset, with no reset asked for."""
    async def body(consumer: AIOKafkaConsumer) -> None:
        consumer.assign([TP])
        consumer.pause(TP)
        assert await consumer.position(TP) == COMMITTED

    node = await run([NOT_COORDINATOR, LOADING, COMMITTED], body)
    assert node.asked[LIST_OFFSETS] == 0


async def test_a_partition_without_a_committed_offset_starts_at_the_beginning(
        restore_coordinator: None) -> None:
    """A new group, or a partition its group never committed: the loaded coordinator answers
    -1 without an error, and `earliest` applies."""
    async def body(consumer: AIOKafkaConsumer) -> None:
        assert await consumer.committed(TP) is None
        consumer.assign([TP])
        consumer.pause(TP)
        assert await consumer.position(TP) == LOG_START

    node = await run([LOADING, -1], body)
    assert node.asked[LIST_OFFSETS] == 1


async def test_a_coordinator_that_never_answers_fails_the_fetch_for_good(
        restore_coordinator: None) -> None:
    """Bounded: past `wait_s` (here a clock second per OffsetFetch answer) `committed()` raises,
    and so does the consumer's next poll while the fetcher places a new assignment; no reset."""
    async def body(consumer: AIOKafkaConsumer) -> None:
        with pytest.raises(CommittedOffsetsUnavailable, match="group g: no committed offsets"):
            await consumer.committed(TP)
        consumer.assign([TP])
        consumer.pause(TP)
        with pytest.raises(CommittedOffsetsUnavailable):
            while True:
                await consumer.getmany(timeout_ms=20)

    node = await run([LOADING], body, lambda node: OffsetFetchGuard(
        wait_s=5.0, clock=lambda: float(node.asked[OFFSET_FETCH])))
    assert node.asked[LIST_OFFSETS] == 0
