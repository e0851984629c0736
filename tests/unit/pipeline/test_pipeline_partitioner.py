"""The memoised partitioner places every key exactly where Kafka's default partitioner does."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner

from app.pipeline.partitioner import MemoPartitioner


def test_same_partitions_as_the_default() -> None:
    memo, default = MemoPartitioner(), DefaultPartitioner()
    keys = [f"producer_byte_rate|{{\"user\":\"u{i}\"}}".encode() for i in range(500)] + [b"", b"x"]
    for n in (1, 3, 8, 12):
        partitions = list(range(n))
        for _ in range(2):  # second pass from the memo
            for key in keys:
                assert memo(key, partitions, partitions) == default(key, partitions, partitions)


def test_no_key_picks_an_available_partition() -> None:
    assert MemoPartitioner()(None, [0, 1, 2], [2]) == 2
