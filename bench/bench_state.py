"""Benchmark of quota state at scale: memory and changelog bytes as a population comes and goes.

What a worker's aggregate holds and writes, without Kafka: the engine over a `PartitionCache`
backed by a real RocksDB database (rocksdict, in a temporary directory), flushed once per second
of event time the way the worker flushes, each flush's writes counted as the changelog records
they would be (key + value bytes; a tombstone is its key). Idle windows are swept as the worker
sweeps them (every sixth of `--idle-expiry-ms` of event time).

Phases (event time):
  active  `--principals` (user, client-id) principals each produce `--events-per-principal`
          requests spread over `--active-s` seconds (an hour by default);
  idle    only `--keep` principals keep producing, one request a second each, for `--idle-s`
          seconds (two hours): everything else expires.

Printed per phase: windows held, RSS (after a collection and `malloc_trim`), changelog records
and bytes written (per second of event time), tombstones, wall and CPU time. Run with
`--help` for the knobs; the defaults are the 1M-principal case (about a minute).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rocksdict import Options, Rdict  # noqa: E402

from app.engine.configs import QuotaConfigs, parse_config_record  # noqa: E402
from app.engine.engine import EngineSettings, QuotaEngine  # noqa: E402
from app.engine.events import RequestEvent  # noqa: E402
from app.engine_build import describe  # noqa: E402
from tables.entity_state import PartitionCache  # noqa: E402

T0 = 1_763_800_000_000


def rss_mb() -> float:
    """Resident memory now (MB), after returning freed heap to the OS where libc can."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 1e6


class RocksStore:
    """One partition's RocksDB, as `PartitionCache` reads it; writes counted as changelog."""

    def __init__(self, path: str) -> None:
        options = Options(raw_mode=True)
        self.db = Rdict(path, options)
        self.records = 0
        self.bytes = 0
        self.tombstones = 0

    def get(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def memory_mb(self) -> float:
        """RocksDB's own memory: memtables and the block cache (part of the RSS)."""
        total = 0
        for name in ("rocksdb.cur-size-all-mem-tables", "rocksdb.block-cache-usage"):
            value = self.db.property_int_value(name)
            total += value or 0
        return total / 1e6

    def items(self) -> Any:
        return self.db.items()

    def write(self, key: str, value: bytes | None) -> None:
        raw = key.encode()
        self.records += 1
        self.bytes += len(raw) + (len(value) if value is not None else 0)
        if value is None:
            self.tombstones += 1
            self.db.delete(raw)
        else:
            self.db.put(raw, value)


def configs() -> QuotaConfigs:
    c = QuotaConfigs()
    c.apply(parse_config_record({"v": 1, "type": "quota_config", "ts": 0,
                                 "entity": {"user": "<default>"},
                                 "quotas": {"producer_byte_rate": 1_000_000,
                                            "request_percentage": 50}}))
    return c


def row(label: str, event_s: float, cache: PartitionCache, store: RocksStore, since: dict[str, int],
        started: tuple[float, float]) -> list[str]:
    written = store.bytes - since["bytes"]
    records = store.records - since["records"]
    tomb = store.tombstones - since["tombstones"]
    since.update(bytes=store.bytes, records=store.records, tombstones=store.tombstones)
    rocks = store.memory_mb()
    return [label, f"{event_s:,.0f}", f"{len(cache):,}", f"{rss_mb():,.0f}", f"{rocks:,.0f}",
            f"{sys.getallocatedblocks():,}",
            f"{records:,}",
            f"{written / 1e6:,.1f}", f"{written / max(event_s, 1) / 1e3:,.1f}", f"{tomb:,}",
            f"{time.perf_counter() - started[0]:,.1f}", f"{time.process_time() - started[1]:,.1f}"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(7)
    settings = EngineSettings(idle_expiry_ms=args.idle_expiry_ms)
    engine = QuotaEngine(settings, configs())
    tmp = tempfile.TemporaryDirectory()
    store = RocksStore(str(Path(tmp.name) / "p0"))
    cache = PartitionCache(store, sweep_every_ms=settings.sweep_every_ms)
    engine.store = cache
    baseline, blocks = rss_mb(), sys.getallocatedblocks()
    since = {"bytes": 0, "records": 0, "tombstones": 0}
    rows: list[list[str]] = []
    started = (time.perf_counter(), time.process_time())

    def feed(events: list[tuple[int, int]], end_ms: int) -> None:
        """(ts, principal) pairs in ts order; a flush (and maybe a sweep) per event second."""
        next_flush = T0
        for ts, p in events:
            while ts >= next_flush:
                flush(next_flush)
                next_flush += 1000
            engine.process(RequestEvent(ts, 1, "PLAINTEXT", f"user-{p}", "app", "10.0.0.1",
                                        "Produce", 1000, 0.5, 0.0, False, 1))
        while next_flush <= end_ms:
            flush(next_flush)
            next_flush += 1000

    def flush(now: int) -> None:
        if cache.sweeps.due(now):
            engine.expire(now)
        engine.drain_windows()  # as the worker does after each step (its top entities)
        cache.mark(engine.drain_touched())
        for key, value in cache.flush():
            store.write(key, value)

    n = args.principals
    active_ms = args.active_s * 1000
    print(f"{n:,} principals x {args.events_per_principal} requests over {args.active_s:,} s, "
          f"then {args.keep:,} of them for {args.idle_s:,} s; idle expiry "
          f"{args.idle_expiry_ms:,} ms; {describe()}", file=sys.stderr)
    events = sorted((T0 + rng.randrange(active_ms), p) for p in range(n)
                    for _ in range(args.events_per_principal))
    feed(events, T0 + active_ms)
    del events
    peak, rocks_peak = rss_mb(), store.memory_mb()
    rows.append(row("active", args.active_s, cache, store, since, started))
    keep = rng.sample(range(n), min(args.keep, n))
    end = T0 + active_ms + args.idle_s * 1000
    idle = [(ts, p) for ts in range(T0 + active_ms, end, 1000) for p in keep]
    feed(idle, end)
    del idle
    rows.append(row("idle", args.idle_s, cache, store, since, started))
    after = rss_mb()
    head = ["phase", "event s", "windows held", "RSS MB", "of it RocksDB MB", "Python blocks", "changelog records",
            "changelog MB", "changelog kB per event s", "tombstones", "wall s", "CPU s"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
    rocks = store.memory_mb()
    print(f"RSS less RocksDB's memtables and cache: baseline {baseline:,.0f} MB, end of the active "
          f"phase {peak - rocks_peak:,.0f} MB ({(peak - rocks_peak - baseline) * 1e6 / max(n, 1):,.0f}"
          f" B per active principal), after the idle phase {after - rocks:,.0f} MB "
          f"({after - rocks - baseline:+,.0f} MB over the baseline); Python blocks allocated: "
          f"{blocks:,} at the start, {sys.getallocatedblocks():,} at the end")
    tmp.cleanup()
    return {"principals": n, "baseline_rss_mb": baseline, "peak_rss_mb": peak,
            "peak_rocksdb_mb": rocks_peak, "after_idle_rss_mb": after, "after_idle_rocksdb_mb": rocks, "rows": [dict(zip(head, r)) for r in rows]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--principals", type=int, default=1_000_000)
    p.add_argument("--events-per-principal", type=int, default=2)
    p.add_argument("--active-s", type=int, default=3600, help="event seconds of activity")
    p.add_argument("--idle-s", type=int, default=7200, help="event seconds after it")
    p.add_argument("--keep", type=int, default=1000, help="principals active after the hour")
    p.add_argument("--idle-expiry-ms", type=int, default=3_600_000)
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = p.parse_args()
    figures = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
