"""Per-entity quota state in a changelog-backed RocksDB Faust table, behind a write-back cache.

Table writes are Faust's expensive path (one changelog record each), so the engine works on
decoded state objects in memory, windows share table rows (buckets), and each touched row is
written at most once per flush.
The flush is tied to offset acknowledgement: a source record is acked (and so can be committed)
only after every window it changed has been written. A crash therefore loses no update; it can
re-apply the records between the last flush's changelog write and the following offset commit
(at-least-once).
"""

from __future__ import annotations

import logging
import struct
import zlib
from typing import Any, Callable, Iterator, MutableMapping

from app.engine.engine import State
from app.engine.state_codec import StateDecodeError, decode, encode

log = logging.getLogger(__name__)

TABLE_NAME = "entity-state"


BUCKETS = 64
_ENTRY = struct.Struct("<HI")


def bucket_of(key: str) -> int:
    """Which table row holds a window: crc32 is stable across processes."""
    return zlib.crc32(key.encode()) % BUCKETS


def encode_entry(key: str, state: State) -> bytes:
    """One window inside a table row: `key_len:u16 state_len:u32 key state`."""
    k = key.encode()
    v = encode(state)
    return _ENTRY.pack(len(k), len(v)) + k + v


def encode_bucket(entries: list[tuple[str, State]]) -> bytes:
    return b"".join(encode_entry(key, state) for key, state in entries)


def decode_bucket(data: bytes) -> dict[str, State]:
    out: dict[str, State] = {}
    offset = 0
    while offset < len(data):
        klen, vlen = _ENTRY.unpack_from(data, offset)
        offset += _ENTRY.size
        key = data[offset:offset + klen].decode()
        offset += klen
        out[key] = decode(data[offset:offset + vlen])
        offset += vlen
    if offset != len(data):
        raise StateDecodeError("truncated bucket")
    return out


class PartitionCache(MutableMapping[str, State]):
    """The decoded windows of one table partition; reads fall through to the table.

    Windows are stored BUCKETS to a table row, so a flush writes at most BUCKETS rows per
    partition however many windows changed: Faust's cost is per table write (a changelog
    record each), and 10k busy entities would otherwise mean 10k+ writes per flush.

    Reads must happen while Faust's current event is from this partition (Faust's RocksDB
    store picks the partition from it), which holds inside the agent's iteration.
    """

    def __init__(self, table: Any) -> None:
        self.table = table
        self.states: dict[str, State] = {}
        self.members: dict[int, set[str]] = {}
        self.dirty: set[int] = set()
        self.dirty_keys: set[str] = set()
        #: encoded entries as last written, so a flush re-encodes only the windows that changed
        self.encoded: dict[str, bytes] = {}
        self.decode_errors = 0

    def _load(self, bucket: int) -> set[str]:
        members = self.members.get(bucket)
        if members is not None:
            return members
        members = self.members[bucket] = set()
        raw = self.table.get(f"b{bucket}")
        if raw:
            try:
                states = decode_bucket(raw)
            except (StateDecodeError, struct.error, UnicodeDecodeError) as exc:
                self.decode_errors += 1
                log.error("table row b%d unreadable (%s): its windows start afresh", bucket, exc)
                return members
            self.states.update(states)
            members.update(states)
        return members

    def __getitem__(self, key: str) -> State:
        state = self.get(key)
        if state is None:
            raise KeyError(key)
        return state

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        state = self.states.get(key)
        if state is not None:
            return state
        self._load(bucket_of(key))
        return self.states.get(key, default)

    def __setitem__(self, key: str, state: State) -> None:
        bucket = bucket_of(key)
        self._load(bucket).add(key)
        self.states[key] = state
        self.dirty.add(bucket)
        self.dirty_keys.add(key)

    def __delitem__(self, key: str) -> None:
        bucket = bucket_of(key)
        del self.states[key]
        self.encoded.pop(key, None)
        self._load(bucket).discard(key)
        self.dirty.add(bucket)

    def __iter__(self) -> Iterator[str]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)

    def mark(self, keys: set[str]) -> None:
        self.dirty_keys |= keys
        self.dirty.update(bucket_of(k) for k in keys)

    def flush(self, write: Callable[[str, bytes], None] | None = None) -> int:
        """Write every dirty row once (through `write(row_key, value)` if given, else by
        setting the table key); return how many rows were written."""
        dirty, self.dirty = self.dirty, set()
        states, encoded = self.states, self.encoded
        for key in self.dirty_keys:
            if key in states:
                encoded[key] = encode_entry(key, states[key])
        self.dirty_keys = set()
        for bucket in dirty:
            members = self.members.get(bucket, ())
            row = b"".join(encoded.get(k) or encode_entry(k, states[k]) for k in sorted(members))
            if write is None:
                self.table[f"b{bucket}"] = row
            else:
                write(f"b{bucket}", row)
        return len(dirty)
