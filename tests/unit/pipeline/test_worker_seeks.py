"""The worker's seeks back over an offset gap (`Worker.admit`, `Worker.seek_back`): an agent never
waits on the consumer's thread for one, and one that fails or hangs is asked again, not raised."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError

from app.pipeline import worker as worker_module
from app.pipeline.continuity import Continuity
from app.pipeline.metrics import WorkerMetrics
from app.pipeline.worker import Worker

TP = TopicPartition("quota.events.request", 0)


class Consumer:
    """Faust's consumer as the seeks see it: `seek_wait` hangs, fails or moves, as told."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self._committed_offset = {TP: 10}
        self.seeks: list[int] = []
        #: the records delivered and not acked, which a commit may not pass
        self._unacked_messages: set[Any] = set()

    async def seek_wait(self, partitions: dict[TopicPartition, int]) -> None:
        self.seeks.extend(partitions.values())
        if self.behaviour == "hangs":  # its thread is in a rebalance that waits for the agents
            await asyncio.Event().wait()
        if self.behaviour == "revoked":
            raise IllegalStateError(f"No current assignment for partition {TP}")


class SeekingWorker:
    """The worker's offset admission and seeks, with a recorded consumer."""

    admit: Any = Worker.admit
    seek_back: Any = Worker.seek_back
    _seek: Any = Worker._seek

    def __init__(self, behaviour: str, log_start: int | None = None) -> None:
        self.continuity = Continuity(reseek_s=0.0)
        self.app = SimpleNamespace(consumer=Consumer(behaviour))
        self._seeks: set[asyncio.Future[None]] = set()
        self.seeder = Seeder(log_start)
        self.metrics = WorkerMetrics()


class Seeder:
    """The side reader's answer for a partition's first offset (None: no answer in time)."""

    def __init__(self, start: int | None) -> None:
        self.start = start
        self.asked = 0

    async def log_start(self, topic: str, partition: int) -> int | None:
        self.asked += 1
        return self.start


@dataclass(eq=False)
class Message:
    """Faust's message as the worker sees it: hashed by identity, as Faust's is."""

    tp: TopicPartition
    offset: int


def message(offset: int) -> Any:
    return SimpleNamespace(message=Message(TP, offset))


@pytest.mark.parametrize("behaviour", ["hangs", "revoked", "moves"])
def test_a_gap_is_judged_at_once_and_its_seek_neither_blocks_nor_raises(
        behaviour: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(worker_module, "SEEK_TIMEOUT_S", 0.05)
    worker = SeekingWorker(behaviour)

    async def run() -> list[bool]:
        admitted = [await worker.admit(message(10)), await worker.admit(message(13))]
        assert len(worker._seeks) == 1  # asked, not awaited
        await asyncio.sleep(0.2)  # the seek ends (the hanging one given up)
        assert not worker._seeks
        # the rewound partition delivers the skipped record: processing goes on from there
        admitted += [await worker.admit(message(11)), await worker.admit(message(12))]
        return admitted

    assert asyncio.run(asyncio.wait_for(run(), 5)) == [True, False, True, True]
    assert worker.app.consumer.seeks == [11]
    failed = [r for r in caplog.records if "seek back to 11 failed" in r.getMessage()]
    assert len(failed) == (0 if behaviour == "moves" else 1)


def test_a_seek_that_failed_is_asked_again_on_the_flush_cadence(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "SEEK_TIMEOUT_S", 0.05)
    worker = SeekingWorker("revoked")

    async def run() -> None:
        await worker.admit(message(10))
        await worker.admit(message(13))
        await asyncio.sleep(0.1)
        for tp, offset in worker.continuity.due(float("inf")):  # as the flush loop does
            worker.seek_back(tp, offset)
        await asyncio.sleep(0.1)

    asyncio.run(run())
    assert worker.app.consumer.seeks == [11, 11]


def test_a_record_not_admitted_is_no_longer_waited_for_by_a_commit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A duplicate or a record dropped while rewinding is never acked: left among the records
    in flight, it would hold the partition's commits back (`faust_patches` item 6)."""
    monkeypatch.setattr(worker_module, "SEEK_TIMEOUT_S", 0.05)
    worker = SeekingWorker("moves")
    records = [message(offset) for offset in (10, 13, 14, 10)]  # a gap, then a duplicate
    in_flight = worker.app.consumer._unacked_messages
    in_flight.update(record.message for record in records)

    async def run() -> list[bool]:
        admitted = [await worker.admit(record) for record in records]
        await asyncio.sleep(0.1)
        return admitted

    assert asyncio.run(asyncio.wait_for(run(), 5)) == [True, False, False, False]
    assert in_flight == {records[0].message}


@pytest.mark.parametrize("log_start", [0, 40])
def test_a_partition_never_committed_is_read_from_its_first_offset(
        log_start: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """No committed offset: the first record delivered past the partition's first offset is a
    gap (records a rebalance discarded), sought back to that offset, asked for once."""
    monkeypatch.setattr(worker_module, "SEEK_TIMEOUT_S", 0.05)
    worker = SeekingWorker("moves", log_start=log_start)
    worker.app.consumer._committed_offset = {}

    async def run() -> list[bool]:
        admitted = [await worker.admit(message(log_start + 7))]
        await asyncio.sleep(0.1)
        return admitted + [await worker.admit(message(offset))
                           for offset in range(log_start, log_start + 8)]

    assert asyncio.run(asyncio.wait_for(run(), 5)) == [False] + [True] * 8
    assert worker.app.consumer.seeks == [log_start]
    assert worker.seeder.asked == 1


def test_a_partition_whose_first_offset_is_unknown_is_taken_from_its_first_record() -> None:
    worker = SeekingWorker("moves", log_start=None)
    worker.app.consumer._committed_offset = {}

    async def run() -> list[bool]:
        return [await worker.admit(message(offset)) for offset in (7, 8)]

    assert asyncio.run(asyncio.wait_for(run(), 5)) == [True, True]
    assert worker.app.consumer.seeks == []
