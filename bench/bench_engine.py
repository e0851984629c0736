"""Benchmark of the pure quota engine on one core: how many samples per second it decides.

A realistic mix: 10k (user, client-id) entities chosen with a Zipf skew (a few hot clients, a
long tail), every quota type configured (producer/consumer byte rates, request_percentage at
several config levels including the defaults, controller mutation rates, per-IP and broker /
listener connection rates), event time advancing at a fixed rate (200k request events per
event-time second by default), so windows roll, samples are purged and hot entities throttle.

Events are built as typed objects up front and frozen out of the garbage collector's view (they
are the benchmark's data, not the engine's); the main figures time only the `QuotaEngine.process`
calls, in CPU time of this process (other work on a shared machine does not count against it),
and a separate untimed pass counts decisions, throttles and directives. The collector runs
with the thresholds every driver sets (`app.gc_tuning`); one row repeats the request workload
with CPython's defaults for comparison.
One row times the same requests through the batch entry (`process_requests` over 4,096-row
columns, as the worker's aggregate and the audit's step 2 call it, no decision objects kept).
A separate line times `parse_event` from contract dicts plus `process`, i.e. what a driver
that receives JSON objects pays. Run `python bench/bench_engine.py --help` for the knobs and
`--profile` for the hottest functions (cProfile).
"""

from __future__ import annotations

import argparse
import bisect
import cProfile
import gc
import io
import itertools
import pstats
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.engine.configs import ConfigUpdate, parse_config_record  # noqa: E402
from app.engine_build import describe  # noqa: E402
from app.gc_tuning import THRESHOLDS, tune_gc  # noqa: E402
from app.engine.batch import RequestColumns  # noqa: E402
from app.engine.engine import Decision, EngineSettings, QuotaEngine, nanos  # noqa: E402
from app.engine.timeline import FOREVER  # noqa: E402
from app.engine.events import (  # noqa: E402
    ConnectionEvent,
    MutationEvent,
    RequestEvent,
    parse_event,
)

T0 = 1_763_800_000_000
TARGET = 400_000  # request events (samples) per second on one core
BATCH_TARGET = 1_000_000  # the same through the batch entry (`QuotaEngine.process_requests`)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench_engine",
        description="Time QuotaEngine.process on a realistic, Zipf-skewed mix of quota events.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--entities", type=int, default=10_000, help="distinct (user, client-id) pairs")
    p.add_argument(
        "--users", type=int, default=2_000, help="distinct users the pairs are spread over"
    )
    p.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent s of entity popularity")
    p.add_argument("--requests", type=int, default=1_000_000, help="request events to time")
    p.add_argument(
        "--request-rate", type=int, default=200_000, help="request events per event-time second"
    )
    p.add_argument("--mutations", type=int, default=200_000, help="mutation events to time")
    p.add_argument(
        "--mutation-rate", type=int, default=2_000, help="mutation events per event-time second"
    )
    p.add_argument("--connections", type=int, default=200_000, help="connection events to time")
    p.add_argument(
        "--connection-rate", type=int, default=5_000, help="connection events per event-time second"
    )
    p.add_argument("--ips", type=int, default=5_000, help="distinct client IPs")
    p.add_argument(
        "--parse", type=int, default=200_000, help="request dicts for the parse+process figure"
    )
    p.add_argument("--scope", choices=("broker", "cluster"), default="broker")
    p.add_argument("--brokers", type=int, default=3, help="brokers the events come from")
    p.add_argument("--seed", type=int, default=20241025)
    p.add_argument("--repeat", type=int, default=3, help="timed runs per workload (best is shown)")
    p.add_argument(
        "--profile", action="store_true", help="cProfile the request workload, print hotspots"
    )
    p.add_argument("--top", type=int, default=20, help="functions to show with --profile")
    return p.parse_args(argv)


# -- workload -----------------------------------------------------------------------------------


class Zipf:
    """Draws ranks 0..n-1 with P(k) proportional to 1/(k+1)^s (random.Random, fixed seed)."""

    def __init__(self, n: int, s: float, rnd: random.Random) -> None:
        self.cum = list(itertools.accumulate(1.0 / (k + 1) ** s for k in range(n)))
        self.total = self.cum[-1]
        self.rnd = rnd

    def draw(self) -> int:
        return bisect.bisect_left(self.cum, self.rnd.random() * self.total)


@dataclass
class Workload:
    configs: list[ConfigUpdate]
    requests: list[RequestEvent]
    request_dicts: list[dict[str, Any]]
    mutations: list[MutationEvent]
    connections: list[ConnectionEvent]


def build_configs(args: argparse.Namespace, rnd: random.Random) -> list[ConfigUpdate]:
    """Every quota type, at several levels: overrides for hot entities, defaults for the rest."""
    records: list[dict[str, Any]] = [
        # defaults
        {
            "entity": {"user": "<default>"},
            "quotas": {
                "producer_byte_rate": 2_000_000,
                "consumer_byte_rate": 4_000_000,
                "request_percentage": 20,
                "controller_mutation_rate": 5,
            },
        },
        {
            "entity": {"user": "<default>", "client_id": "<default>"},
            "quotas": {"request_percentage": 10},
        },
        {"entity": {"client_id": "<default>"}, "quotas": {"producer_byte_rate": 1_000_000}},
        {"entity": {"ip": "<default>"}, "quotas": {"connection_creation_rate": 20}},
        {"entity": {"broker": "<default>"}, "quotas": {"max_connection_creation_rate": 2_000}},
        {
            "entity": {"broker": "<default>", "listener": "EXTERNAL"},
            "quotas": {"max_connection_creation_rate": 1_500},
        },
    ]
    for u in range(0, 200, 2):  # user overrides for the hottest users
        records.append(
            {
                "entity": {"user": f"user-{u}"},
                "quotas": {
                    "producer_byte_rate": rnd.choice([500_000, 5_000_000, 50_000_000]),
                    "request_percentage": rnd.choice([5, 50, 200]),
                },
            }
        )
    for u in range(1, 100, 4):  # (user, client) and (user, <default>) overrides
        records.append(
            {
                "entity": {"user": f"user-{u}", "client_id": f"client-{u}-0"},
                "quotas": {"consumer_byte_rate": 10_000_000, "request_percentage": 30},
            }
        )
        records.append(
            {
                "entity": {"user": f"user-{u}", "client_id": "<default>"},
                "quotas": {"controller_mutation_rate": 20},
            }
        )
    for c in range(20):  # client-id quotas shared by every user of a client id
        records.append(
            {"entity": {"client_id": f"shared-{c}"}, "quotas": {"producer_byte_rate": 3_000_000}}
        )
    for i in range(50):
        records.append(
            {
                "entity": {"ip": f"10.{i // 250}.{i % 250}.1"},
                "quotas": {"connection_creation_rate": 100},
            }
        )
    return [parse_config_record({"type": "quota_config", "v": 1, "ts": T0, **r}) for r in records]


def build_workload(args: argparse.Namespace) -> Workload:
    rnd = random.Random(args.seed)
    entities = []
    for k in range(args.entities):
        user = f"user-{k % args.users}"
        client = (
            f"shared-{k % 20}" if k % 50 == 49 else f"client-{k % args.users}-{k // args.users}"
        )
        entities.append((user, client))
    rnd.shuffle(entities)  # popularity rank independent of the naming
    pick = Zipf(args.entities, args.zipf, rnd)
    ips = [f"10.{i // 250 % 250}.{i % 250}.1" for i in range(args.ips)]
    ip_pick = Zipf(args.ips, args.zipf, rnd)

    requests, dicts = [], []
    apis = ("Produce",) * 50 + ("Fetch",) * 35 + ("Metadata", "OffsetCommit", "Heartbeat") * 5
    for i in range(max(args.requests, args.parse)):
        user, client = entities[pick.draw()]
        api = rnd.choice(apis)
        ts = T0 + i * 1000 // args.request_rate
        broker = 1 + i % args.brokers
        nbytes = int(rnd.expovariate(1 / 2000)) if api in ("Produce", "Fetch") else 0
        thread_ms = round(rnd.expovariate(1 / 0.3), 3)
        network_ms = round(rnd.expovariate(1 / 0.05), 3)
        exempt = api == "Fetch" and rnd.random() < 0.05  # follower fetches
        d = {
            "type": "request",
            "v": 1,
            "ts": ts,
            "broker": broker,
            "listener": "EXTERNAL",
            "user": user,
            "client_id": client,
            "ip": ips[i % len(ips)],
            "api": api,
            "bytes": nbytes,
            "thread_time_ms": thread_ms,
            "network_time_ms": network_ms,
            "exempt": exempt,
            "count": 1,
        }
        if i < args.requests:
            requests.append(
                RequestEvent(
                    ts,
                    broker,
                    "EXTERNAL",
                    user,
                    client,
                    d["ip"],
                    api,
                    nbytes,
                    thread_ms,
                    network_ms,
                    exempt,
                    1,
                )
            )
        if i < args.parse:
            dicts.append(d)

    mutations = []
    mapis = (("CreateTopics", 7), ("CreateTopics", 5), ("DeleteTopics", 6), ("CreatePartitions", 3))
    for i in range(args.mutations):
        user, client = entities[pick.draw()]
        api, version = rnd.choice(mapis)
        mutations.append(
            MutationEvent(
                T0 + i * 1000 // args.mutation_rate,
                1 + i % args.brokers,
                user,
                client,
                api,
                version,
                rnd.choice((1, 1, 3, 6, 12, 50)),
                False,
            )
        )

    connections = []
    for i in range(args.connections):
        inter = rnd.random() < 0.02
        connections.append(
            ConnectionEvent(
                T0 + i * 1000 // args.connection_rate,
                1 + i % args.brokers,
                "REPLICATION" if inter else rnd.choice(("EXTERNAL", "INTERNAL")),
                ips[ip_pick.draw()],
                inter,
            )
        )
    return Workload(build_configs(args, rnd), requests, dicts, mutations, connections)


# -- timing -------------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    events: int
    seconds: float
    decisions: int
    throttled: int
    directives: int


def fresh_engine(args: argparse.Namespace, configs: list[ConfigUpdate]) -> QuotaEngine:
    engine = QuotaEngine(EngineSettings(scope=args.scope))
    for update in configs:
        engine.process(update)
    return engine


def timed(
    name: str,
    args: argparse.Namespace,
    configs: list[ConfigUpdate],
    items: list[Any],
    prepare: Callable[[Any], Any] | None = None,
) -> Result:
    """Best of --repeat timed runs of the process calls alone, then one untimed counting run."""
    best = float("inf")
    for _ in range(args.repeat):
        process = fresh_engine(args, configs).process
        start = time.process_time()
        if prepare is None:
            for event in items:
                process(event)
        else:
            for raw in items:
                process(prepare(raw))
        best = min(best, time.process_time() - start)
    process = fresh_engine(args, configs).process
    decisions = throttled = directives = 0
    for item in items:
        ds, dr = process(item if prepare is None else prepare(item))
        decisions += len(ds)
        directives += len(dr)
        throttled += sum(1 for d in ds if d.throttle_time_ms)
    return Result(name, len(items), best, decisions, throttled, directives)


def as_batches(requests: list[RequestEvent], size: int) -> list[RequestColumns]:
    """The requests as the worker's aggregate receives them: columns of `size` rows each."""
    out = []
    for start in range(0, len(requests), size):
        batch = RequestColumns()
        for e in requests[start:start + size]:
            batch.append(e.ts, e.broker, e.gateway, e.listener, e.user, e.client_id, e.ip, e.api,
                         e.bytes, nanos(e.thread_ms), nanos(e.network_ms), e.exempt, e.count,
                         FOREVER, 0)
        out.append(batch)
    return out


def timed_batches(args: argparse.Namespace, configs: list[ConfigUpdate],
                  batches: list[RequestColumns]) -> Result:
    """`process_requests` over the batches as the live aggregate calls it (no decision objects
    kept, only directives), best of --repeat; the decisions are counted by a second pass."""
    best = float("inf")
    for _ in range(args.repeat):
        engine = fresh_engine(args, configs)
        start = time.process_time()
        for batch in batches:
            engine.process_requests(batch)
        best = min(best, time.process_time() - start)
    engine = fresh_engine(args, configs)
    decisions = throttled = directives = 0
    for batch in batches:
        rows: list[list[Decision]] = []
        directives += len(engine.process_requests(batch, rows))
        decisions += sum(len(r) for r in rows)
        throttled += sum(1 for r in rows for d in r if d.throttle_time_ms)
    events = sum(len(b) for b in batches)
    return Result(f"requests, batch entry ({len(batches[0]):,}-row columns)", events, best,
                  decisions, throttled, directives)


def timed_parse_only(args: argparse.Namespace, dicts: list[dict[str, Any]]) -> Result:
    best = float("inf")
    for _ in range(args.repeat):
        start = time.process_time()
        for d in dicts:
            parse_event(d)
        best = min(best, time.process_time() - start)
    return Result("parse_event only (no engine)", len(dicts), best, 0, 0, 0)


def print_table(results: list[Result]) -> None:
    header = ("workload", "events", "events/s", "decisions/s", "µs/event", "throttled",
              "directives")
    rows = [
        (
            r.name,
            f"{r.events:,}",
            f"{r.events / r.seconds:,.0f}",
            f"{r.decisions / r.seconds:,.0f}",
            f"{r.seconds / r.events * 1e6:.2f}",
            f"{r.throttled / max(r.decisions, 1):.1%}",
            f"{r.directives:,}",
        )
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    line = "  ".join(
        h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))
    )
    print(line)
    print("-" * len(line))
    for row in rows:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )
        )
    print(
        "an event is one sample (a request the broker recorded); a decision is one quota's "
        "record + check (a request makes 1-2); 'events' excludes parsing unless the name says so."
    )


def profile(args: argparse.Namespace, work: Workload) -> None:
    engine = fresh_engine(args, work.configs)
    process = engine.process
    prof = cProfile.Profile()
    prof.enable()
    for event in work.requests:
        process(event)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
    print(f"\ncProfile of the request workload ({len(work.requests):,} events), by own time:")
    print(out.getvalue())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    t = time.perf_counter()
    work = build_workload(args)
    print(
        f"built {len(work.requests):,} requests, {len(work.mutations):,} mutations, "
        f"{len(work.connections):,} connections over {args.entities:,} entities "
        f"(Zipf s={args.zipf}, seed {args.seed}, {len(work.configs)} quota configs, "
        f"scope {args.scope}) "
        f"in {time.perf_counter() - t:.1f} s; Python {sys.version.split()[0]}, one core, "
        f"engine {describe()}, GC thresholds {THRESHOLDS}\n"
    )
    defaults = gc.get_threshold()
    tune_gc()  # as every driver does; it also freezes the workload (the benchmark's data)
    results = [timed("requests (typed events)", args, work.configs, work.requests)]
    batches = as_batches(work.requests, 4096)
    tune_gc()  # freezes the columns too
    results.append(timed_batches(args, work.configs, batches))
    gc.set_threshold(*defaults)
    results.append(timed(f"requests, GC thresholds {defaults}", args, work.configs, work.requests))
    tune_gc()
    if work.request_dicts:
        n = len(work.request_dicts)
        if n != len(work.requests):  # the same prefix, typed, for a like-for-like comparison
            results.append(
                timed(f"requests, first {n:,} (typed)", args, work.configs, work.requests[:n])
            )
        results.append(
            timed(
                f"requests, first {n:,} incl. parse_event",
                args,
                work.configs,
                work.request_dicts,
                parse_event,
            )
        )
        results.append(timed_parse_only(args, work.request_dicts))
    if work.mutations:
        results.append(timed("mutations", args, work.configs, work.mutations))
    if work.connections:
        results.append(timed("connections", args, work.configs, work.connections))
    print_table(results)
    req, batch = results[0], results[1]  # typed events, then the batch entry
    rate = req.events / req.seconds
    print(
        f"\nrequest samples (events)/s on one core: {rate:,.0f} (target {TARGET:,}: "
        f"{'met' if rate >= TARGET else f'not met, {rate / TARGET:.0%} of it'}); "
        f"{req.decisions / req.seconds:,.0f} quota decisions/s"
    )
    rate = batch.events / batch.seconds
    print(
        f"request samples/s through the batch entry on one core: {rate:,.0f} (target "
        f"{BATCH_TARGET:,}: {'met' if rate >= BATCH_TARGET else f'not met, {rate / BATCH_TARGET:.0%} of it'})"
    )
    if args.profile:
        profile(args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
