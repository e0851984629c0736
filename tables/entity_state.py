"""Per-window quota state in a changelog-backed RocksDB Faust table, behind a write-back cache.

One table key per window (`app.engine.engine` state keys), its value in the versioned format of
`app.engine.state_codec`: the changelog carries bytes in proportion to the windows that
changed, and an idle window leaves with a tombstone, so the compacted changelog and RocksDB
shrink with the active population.

The engine works on decoded state objects in memory; each changed window is written at most
once per flush. The flush is tied to offset acknowledgement: a source record is acked (and so
can be committed) only after every window it changed has been written. A crash therefore loses
no update; it can re-apply the records between the last flush's changelog write and the
following offset commit (at-least-once).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, MutableMapping, Protocol

from app.engine.engine import Cadence, State
from app.engine.state_codec import StateDecodeError, decode, encode

log = logging.getLogger(__name__)

#: Renamed from "entity-state" (rows of 64 windows) when rows became windows: an upgraded
#: worker starts its windows afresh (they hold seconds of history) instead of misreading rows.
TABLE_NAME = "entity-windows"


class WindowStore(Protocol):
    """One partition of the table as bytes (`tables.faust_store.PartitionStore`, or a dict in
    tests and benchmarks)."""

    def get(self, key: bytes) -> bytes | None: ...

    def items(self) -> Iterable[tuple[bytes, bytes]]: ...


#: A flush's writes: each changed window's new bytes, None for a tombstone.
Changes = list[tuple[str, "bytes | None"]]


class PartitionCache(MutableMapping[str, State]):
    """The decoded windows of one table partition; reads fall through to the partition's store.

    `load_all` reads every window the partition holds, so an expiry sweep (`QuotaEngine.expire`
    over this mapping) sees windows written before a restart too.
    """

    def __init__(self, store: WindowStore, sweep_every_ms: int = 0) -> None:
        """`sweep_every_ms`: how often (event time) `sweeps` says an expiry sweep is due."""
        self.store = store
        self.states: dict[str, State] = {}
        self.dirty: set[str] = set()
        #: windows dropped since the last flush: their tombstones, and never read back
        self.deleted: set[str] = set()
        self.decode_errors = 0
        self.sweeps = Cadence(sweep_every_ms)

    def _decode(self, key: str, raw: bytes) -> State | None:
        try:
            return decode(raw)
        except StateDecodeError as exc:
            self.decode_errors += 1
            log.error("window %r unreadable (%s): it starts afresh", key, exc)
            return None

    def load_all(self) -> int:
        """Decode every window the partition holds that is not in memory yet; how many."""
        loaded = 0
        for raw_key, raw in self.store.items():
            key = raw_key.decode()
            if key in self.states or key in self.deleted:
                continue
            state = self._decode(key, raw)
            if state is not None:
                self.states[key] = state
                loaded += 1
        return loaded

    def __getitem__(self, key: str) -> State:
        state = self.get(key)
        if state is None:
            raise KeyError(key)
        return state

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        state = self.states.get(key)
        if state is not None:
            return state
        if key in self.deleted:
            return default
        raw = self.store.get(key.encode())
        if raw is None:
            return default
        state = self._decode(key, raw)
        if state is None:
            return default
        self.states[key] = state
        return state

    def __setitem__(self, key: str, state: State) -> None:
        self.states[key] = state
        self.dirty.add(key)
        self.deleted.discard(key)

    def __delitem__(self, key: str) -> None:
        del self.states[key]
        self.dirty.discard(key)
        self.deleted.add(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.states)

    def __len__(self) -> int:
        return len(self.states)

    def mark(self, keys: set[str]) -> None:
        self.dirty |= keys

    def flush(self) -> Changes:
        """Every changed window once, encoded, and a tombstone per dropped one: what to write
        to the partition's store and changelog (`tables.faust_store.PartitionStore.write`)."""
        dirty, self.dirty = self.dirty, set()
        deleted, self.deleted = self.deleted, set()
        states = self.states
        changes: Changes = [(key, encode(states[key])) for key in dirty if key in states]
        changes.extend((key, None) for key in deleted)
        return changes
