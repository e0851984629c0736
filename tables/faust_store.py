"""One partition of a Faust RocksDB table as plain bytes, for `PartitionCache`.

Faust's `Table` picks the RocksDB partition from the current event and keeps its own
per-key bookkeeping; the cache knows its partition and does its own, so it reads and writes the
partition's database directly (`Store._db_for_partition`, Faust's own accessor) and sends each
write to the changelog with `Table.send_changelog`, whose callback records the changelog offset
in RocksDB as a `table[key] = value` would. The table must have raw key and value serializers (`raw_table`):
keys are the window keys' UTF-8 bytes in RocksDB and on the changelog alike, so a changelog
restore writes exactly what `get` reads.
"""

from __future__ import annotations

from typing import Any, Iterable


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

    def writer(self, delivered: list[Any]) -> Any:
        """`PartitionCache.flush`'s write: RocksDB, then the changelog (its delivery future
        goes to `delivered`, for the flush to wait on before acking inputs)."""
        db = self._db()
        table, partition = self.table, self.partition

        def write(key: str, value: bytes | None) -> None:
            raw = key.encode()
            if value is None:
                db.delete(raw)
            else:
                db.put(raw, value)
            delivered.append(table.send_changelog(partition, raw, value))
        return write
