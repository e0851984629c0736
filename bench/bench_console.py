"""Benchmark of the console at scale: what a page costs with `--entities` active entities, and
what it costs the worker's engine step.

Without Kafka: the compiled engine runs request columns through `apply_record` into per-partition
dicts, as the worker's engine step does (two windows per principal: producer bytes and request
time). Then, on the windows it left:

  engine step   samples per CPU-second into the console's dicts (kept for the whole run) and
                into dicts emptied every CLEAR_EVERY batches (what the metrics' top entities did
                before the console: the same code path, a dict that never grows), best of
                --repeat, interleaved;
  overview      `Console.entities` (select, sort, page, JSON) for several queries: the first
                page by utilization, a deep page, a sort by entity, a filter, throttled only;
  entity page   `Console.entity` for one principal (explanation and history included);
  loop work     what the worker's loop does for the console once a second (one history point
                for each charted window) and every 10 s (the busiest, over every window).

Times are wall-clock per call on an otherwise idle process (median and worst of --calls).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from app.console.index import ConsoleIndex  # noqa: E402
from app.console.service import Console, ConsoleAccess  # noqa: E402
from app.engine.batch import RequestColumns  # noqa: E402
from app.engine.configs import QuotaConfigs, parse_config_record  # noqa: E402
from app.engine.engine import EngineSettings, QuotaEngine, nanos  # noqa: E402
from app.engine.timeline import FOREVER  # noqa: E402
from app.engine_build import describe  # noqa: E402
from app.gc_tuning import tune_gc  # noqa: E402
from app.pipeline.aggregate import apply_record  # noqa: E402

T0 = 1_763_800_000_000
PARTITIONS = 8
#: batches between two clears of the dicts in the variant without the console: about the 10 s
#: (of 20 s of traffic) the metrics' top entities kept them
CLEAR_EVERY = 1_000


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entities", type=int, default=100_000, help="active windows (about)")
    p.add_argument("--seconds", type=int, default=20, help="event time the traffic covers")
    p.add_argument("--calls", type=int, default=20, help="calls per query timed")
    p.add_argument("--repeat", type=int, default=3, help="engine-step runs per variant")
    p.add_argument("--history", type=int, default=1000, help="charted windows")
    return p.parse_args(argv)


def configs() -> QuotaConfigs:
    out = QuotaConfigs()
    out.apply(parse_config_record({"type": "quota_config", "v": 1, "ts": 0,
                                   "entity": {"user": "<default>"},
                                   "quotas": {"producer_byte_rate": 50_000,
                                              "request_percentage": 10}}))
    return out


def batches(principals: int, seconds: int, rnd: random.Random) -> list[tuple[int, RequestColumns]]:
    """(partition, 500-row columns) covering every principal about once a second."""
    out = []
    for second in range(seconds):
        by_partition: dict[int, RequestColumns] = {}
        for i in range(principals):
            user = f"user-{i}"
            p = zlib.crc32(user.encode()) % PARTITIONS
            batch = by_partition.get(p)
            if batch is None or len(batch) >= 500:
                if batch is not None:
                    out.append((p, batch))
                batch = by_partition[p] = RequestColumns()
            heavy = i % 50 == 0
            batch.append(T0 + second * 1000 + rnd.randrange(1000), 1, 0, "PLAINTEXT", user,
                         "app", "", "Produce", rnd.randrange(60_000, 150_000) if heavy else 500,
                         nanos(rnd.uniform(0.1, 150.0 if heavy else 2.0)), 0, False, 1,
                         FOREVER, 0)
        out.extend(by_partition.items())
    return out


Stores = dict[int, dict[str, Any]]


def engine_step(work: list[tuple[int, RequestColumns]], keep: bool
                ) -> tuple[float, QuotaEngine, ConsoleIndex, Stores]:
    """CPU seconds of the worker's engine step over `work`; `keep`: the console's dicts."""
    engine = QuotaEngine(EngineSettings(scope="cluster"), configs())
    index = ConsoleIndex(0)
    stores: Stores = {p: {} for p in range(PARTITIONS)}
    started = time.process_time()
    for n, (partition, batch) in enumerate(work):
        engine.store = stores[partition]
        latest = index.checks(partition)
        apply_record(engine, batch, [], latest)
        engine.drain_touched()
        if not keep and n % CLEAR_EVERY == 0:
            for checks in index.partitions.values():
                checks.clear()
    return time.process_time() - started, engine, index, stores


def timed(call: Callable[[], Any], calls: int) -> tuple[float, float]:
    """(median, worst) wall ms of `call`."""
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return statistics.median(out), max(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tune_gc()  # as the worker does
    rnd = random.Random(7)
    principals = args.entities // 2
    print(f"quota-streams console benchmark · {describe()} · {principals:,} principals, "
          f"{args.seconds} s of event time", flush=True)
    work = batches(principals, args.seconds, rnd)
    samples = sum(len(b) for _, b in work)

    print("\nengine step (apply_record, as the worker's), samples per CPU-second:", flush=True)
    runs: dict[bool, list[float]] = {True: [], False: []}
    held: tuple[QuotaEngine, ConsoleIndex, Stores] | None = None
    for _ in range(args.repeat):
        for keep in (False, True):
            held = None  # the last run's windows go before the next run (the collector)
            gc.collect()
            cpu, e, i, s = engine_step(work, keep)
            runs[keep].append(cpu)
            if keep:
                held = e, i, s
    assert held is not None
    engine, index, stores = held
    for keep, label in ((False, f"checks in dicts emptied every {CLEAR_EVERY:,} batches"),
                        (True, "checks kept for the console")):
        best = min(runs[keep])
        print(f"  {label:<48} {samples / best:>12,.0f} /CPU-s  (best of {args.repeat})")
    ratio = min(runs[True]) / min(runs[False])
    print(f"  console / without: {ratio:.3f} of the CPU per sample")

    index.history.capacity = args.history
    now_ms = T0 + args.seconds * 1000

    def state_of(partition: int, key: str) -> Any:
        return stores[partition].get(key)

    async def fetch(url: str, path: str, params: Any) -> Any:
        raise AssertionError("one worker")

    async def write(records: Any) -> None:
        raise AssertionError("read-only")

    console = Console(index, state_of, lambda: engine.configs, engine.settings, ConsoleAccess(),
                      "http://w0", lambda: ["http://w0"], fetch, write,
                      clock=lambda: now_ms / 1000)
    print(f"\noverview with {len(index):,} windows held (one worker), ms per page:")
    print(f"  {'query':<44} {'median':>8} {'worst':>8} {'rows':>6} {'matching':>10}")
    queries = [("first page by utilization", {}),
               ("page 100 by utilization (offset 4,950)", {"offset": "4950"}),
               ("first page by entity", {"sort": "entity", "desc": "0"}),
               ("filter user-12 (substring)", {"q": "user-12"}),
               ("throttled now", {"throttled": "1"})]
    for name, params in queries:
        def call(params: dict[str, str] = params) -> Any:
            status, body = asyncio.run(console.entities({"limit": "50", **params}))
            assert status == 200
            return orjson.dumps(body), body

        median, worst = timed(call, args.calls)
        body = call()[1]
        print(f"  {name:<44} {median:>8.1f} {worst:>8.1f} {len(body['rows']):>6} "
              f"{body['total']:>10,}")
    entity = orjson.dumps({"user": "user-0", "client_id": ""}).decode()
    median, worst = timed(lambda: orjson.dumps(asyncio.run(console.entity({"entity": entity}))),
                          args.calls)
    print(f"  {'entity page (user-0)':<44} {median:>8.1f} {worst:>8.1f}")

    print("\nthe worker loop's console work, ms per call:")
    busiest = timed(lambda: index.busiest(args.history, T0), args.calls)
    index.history.choose([k for k, _ in index.busiest(args.history, T0)[0]], now_ms // 1000)
    second = [now_ms // 1000]

    def reading(key: str) -> tuple[float, float, dict[int, float]] | None:
        found = index.locate(key)
        if found is None:
            return None
        partition, check = found
        state = state_of(partition, key)
        return state.peek(max(now_ms, state.clock), 11, 1000), check.limit, {}

    def tick() -> None:
        second[0] += 1
        index.history.record(second[0], reading)

    point = timed(tick, args.calls)
    print(f"  {'busiest ' + str(args.history) + ' of every window (every 10 s)':<44} "
          f"{busiest[0]:>8.1f} {busiest[1]:>8.1f}")
    print(f"  {'a history point for ' + str(len(index.history.series)) + ' windows (1/s)':<44} "
          f"{point[0]:>8.1f} {point[1]:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
