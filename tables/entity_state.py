"""Per-entity quota state in a changelog-backed RocksDB Faust table, behind a write-back cache.

Table writes are Faust's expensive path (one changelog record each), so the engine works on
decoded state objects in memory and each touched window is written at most once per flush.
The flush is tied to offset acknowledgement: a source record is acked (and so can be committed)
only after every window it changed has been written. A crash therefore loses no update; it can
re-apply the records between the last flush's changelog write and the following offset commit
(at-least-once).
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, MutableMapping

from app.engine.engine import State
from app.engine.state_codec import StateDecodeError, decode, encode

log = logging.getLogger(__name__)

TABLE_NAME = "entity-state"


class PartitionCache(MutableMapping[str, State]):
    """The decoded windows of one table partition; reads fall through to the table.

    Reads must happen while Faust's current event is from this partition (Faust's RocksDB
    store picks the partition from it), which holds inside the agent's iteration.
    """

    def __init__(self, table: Any) -> None:
        self.table = table
        self.states: dict[str, State] = {}
        self.dirty: set[str] = set()
        self.decode_errors = 0

    def __getitem__(self, key: str) -> State:
        state = self.get(key)
        if state is None:
            raise KeyError(key)
        return state

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        state = self.states.get(key)
        if state is not None:
            return state
        raw = self.table.get(key)
        if raw is None:
            return default
        try:
            state = decode(raw)
        except StateDecodeError as exc:
            self.decode_errors += 1
            log.error("state %r unreadable (%s): starting a fresh window", key, exc)
            return default
        self.states[key] = state
        return state

    def __setitem__(self, key: str, state: State) -> None:
        self.states[key] = state
        self.dirty.add(key)

    def __delitem__(self, key: str) -> None:
        del self.states[key]
        self.dirty.discard(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)

    def mark(self, keys: set[str]) -> None:
        self.dirty |= keys

    def flush(self) -> int:
        """Write every dirty window once; return how many were written."""
        dirty, self.dirty = self.dirty, set()
        table = self.table
        for key in dirty:
            table[key] = encode(self.states[key])
        return len(dirty)
