"""One partition of a Faust RocksDB table as plain bytes, for `PartitionCache`.

Faust's `Table` picks the RocksDB partition from the current event and sends one changelog
record per `table[key] = value`, each through its own future and callback (tens of µs, which at
tens of thousands of changed windows a second was most of a worker's time). The cache knows its
partition and flushes many windows at once, so it writes the partition's database directly
(`Store._db_for_partition`, Faust's own accessor) in one write batch, appends the changelog
records to record batches of the app's Kafka producer (one send per batch), and once they are
acknowledged records the changelog offset in RocksDB, as Faust's changelog callback would
(`Store.set_persisted_offset`: a restarted worker restores only what follows it).

The table must have raw key and value serializers (`raw_table`): keys are the window keys'
UTF-8 bytes in RocksDB and on the changelog alike, so a changelog restore writes exactly what
`get` reads.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterable

import rocksdict
from faust.types import TP


def raw_table(table: Any) -> Any:
    """The table with raw key and value serializers (Faust's `Table` takes no argument for
    them and picks JSON for plain types), set before its store and changelog topic exist."""
    table.key_serializer = table.value_serializer = "raw"
    return table


class PartitionStore:
    """Reads of one table partition's RocksDB, and writes that also go to its changelog."""

    def __init__(self, table: Any, partition: int) -> None:
        self.table = table
        self.partition = partition

    def _db(self) -> Any:
        return self.table.data._db_for_partition(self.partition)

    def get(self, key: bytes) -> bytes | None:
        return self._db().get(key)

    def items(self) -> Iterable[tuple[bytes, bytes]]:
        store = self.table.data
        return ((k, v) for k, v in self._db().items() if k != store.offset_key)

    async def write(self, changes: list[tuple[str, bytes | None]]) -> Awaitable[None]:
        """Write `changes` (None: a tombstone) to RocksDB and hand them to the producer; the
        returned awaitable completes once the broker acknowledged them all."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        records = []
        for key, value in changes:
            raw = key.encode()
            records.append((raw, value))
            if value is None:
                batch.delete(raw)
            else:
                batch.put(raw, value)
        self._db().write(batch)
        producer = self.table.app.producer._ensure_producer()
        topic = self.table.changelog_topic.get_topic_name()
        sent: list[tuple[asyncio.Future, int]] = []
        builder, count = producer.create_batch(), 0
        for raw, value in records:
            if builder.append(key=raw, value=value, timestamp=None) is None:  # full
                sent.append((await producer.send_batch(builder, topic, partition=self.partition),
                             count))
                builder, count = producer.create_batch(), 0
                builder.append(key=raw, value=value, timestamp=None)
            count += 1
        if count:
            sent.append((await producer.send_batch(builder, topic, partition=self.partition),
                         count))
        return self._delivered(TP(topic, self.partition), sent)

    async def _delivered(self, tp: TP, sent: list[tuple[asyncio.Future, int]]) -> None:
        if not sent:
            return
        metadata = await asyncio.gather(*(future for future, _ in sent))
        self.table.data.set_persisted_offset(tp, metadata[-1].offset + sent[-1][1] - 1)
