"""Benchmark of the directive active set: is a lookup cheap enough for a broker's request path?

Fills an `ActiveSet` with many directives over mixed entity kinds (user-wide, client-id-wide and
exact client quotas, mutation, per-IP and per-listener connection directives), then times hits and
misses of every query. Throughput comes from a tight loop; mean/p50/p99 latency from timing each
call separately (which adds the timer's own ~0.05-0.1 µs). Run:

    python bench/bench_subscriber.py --directives 100000 --lookups 200000
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from app.subscriber.active_set import ActiveSet

NOW = 1_763_800_000_000
LOCAL = 1
CLIENT_QUOTAS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def _directive(entity: dict[str, Any], quota: str, action: str, until: int, **kw: Any) -> dict:
    return {
        "v": 1, "ts": NOW, "scope": kw.get("scope", "cluster"), "broker": kw.get("broker"),
        "entity": entity, "quota": quota, "action": action, "throttle_time_ms": until - NOW,
        "until": until, "observed": 600.0, "limit": 500.0, "window_ms": 10500,
        "config_level": "/config/users/x",
    }


def fill(active: ActiveSet, n: int, rng: random.Random) -> dict[str, list[tuple]]:
    """Apply `n` directives; return query arguments that hit, per query kind."""
    hits: dict[str, list[tuple]] = {"request": [], "mutation": [], "connection": []}
    for i in range(n):
        until = NOW + rng.randint(1_000, 600_000)
        kind = i % 10
        scope = {"scope": "broker", "broker": LOCAL} if i % 7 == 0 else {}
        if kind < 3:
            d = _directive({"user": f"user{i}", "client_id": ""}, CLIENT_QUOTAS[i % 3],
                           "throttle", until, **scope)
            hits["request"].append((f"user{i}", f"app{i % 50}"))
        elif kind < 5:
            d = _directive({"user": "", "client_id": f"client{i}"}, CLIENT_QUOTAS[i % 3],
                           "throttle", until, **scope)
            hits["request"].append((f"someone{i % 97}", f"client{i}"))
        elif kind < 7:
            d = _directive({"user": f"user{i}", "client_id": f"app{i}"}, CLIENT_QUOTAS[i % 3],
                           "throttle", until, **scope)
            hits["request"].append((f"user{i}", f"app{i}"))
        elif kind == 7:
            d = _directive({"user": f"ops{i}", "client_id": "tf"}, "controller_mutation_rate",
                           "reject" if i % 2 else "throttle", until, **scope)
            hits["mutation"].append((f"ops{i}", "tf"))
        elif kind == 8:
            ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
            d = _directive({"ip": ip}, "connection_creation_rate", "close_connection", until)
            hits["connection"].append((ip, "EXTERNAL"))
        else:
            d = _directive({"broker": LOCAL, "listener": f"L{i}"},
                           "max_connection_creation_rate", "delay_connection", until)
            hits["connection"].append(("192.0.2.1", f"L{i}"))
        active.apply(d)
    return hits


def misses(kind: str, count: int) -> list[tuple]:
    if kind == "connection":
        return [(f"172.16.{i >> 8 & 255}.{i & 255}", "NOPE") for i in range(count)]
    return [(f"nobody{i}", f"noclient{i}") for i in range(count)]


def measure(call: Callable[..., Any], args: Sequence[tuple], lookups: int) -> dict[str, float]:
    """Throughput from a tight loop, latency percentiles from per-call timing."""
    sample = [args[i % len(args)] for i in range(lookups)]
    start = time.perf_counter()
    for a in sample:
        call(*a)
    elapsed = time.perf_counter() - start
    clock = time.perf_counter_ns
    lat = []
    for a in sample:
        t0 = clock()
        call(*a)
        lat.append(clock() - t0)
    lat.sort()
    return {
        "per_s": lookups / elapsed,
        "mean": statistics.fmean(lat) / 1000,
        "p50": lat[len(lat) // 2] / 1000,
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1000,
    }


def locked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The same call behind a threading.Lock, as DirectiveSubscriber's sync API does it."""
    lock = threading.Lock()

    def call(*args: Any) -> Any:
        with lock:
            return fn(*args)

    return call


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--directives", type=int, default=100_000, help="directives to load")
    parser.add_argument("--lookups", type=int, default=200_000, help="lookups per row")
    parser.add_argument("--seed", type=int, default=7, help="random seed")
    opts = parser.parse_args(argv)

    rng = random.Random(opts.seed)
    active = ActiveSet(LOCAL)
    t0 = time.perf_counter()
    hits = fill(active, opts.directives, rng)
    fill_s = time.perf_counter() - t0
    now = NOW + 500  # every loaded directive is still active

    def request(u: str, c: str) -> Any:
        return active.request_throttle(u, c, now)

    def mutation(u: str, c: str) -> Any:
        return active.mutation(u, c, now)

    def connection(ip: str, listener: str) -> Any:
        return active.connection(ip, listener, now)

    rows = [
        ("request_throttle", "hit", request, hits["request"]),
        ("request_throttle", "miss", request, misses("request", 10_000)),
        ("request_throttle+lock", "hit", locked(request), hits["request"]),
        ("mutation", "hit", mutation, hits["mutation"]),
        ("mutation", "miss", mutation, misses("mutation", 10_000)),
        ("connection", "hit", connection, hits["connection"]),
        ("connection", "miss", connection, misses("connection", 10_000)),
    ]
    print(f"active set: {len(active):,} directives loaded in {fill_s:.2f} s "
          f"({opts.directives / fill_s:,.0f} applies/s); {opts.lookups:,} lookups per row\n")
    header = (f"{'query':<22} {'case':<5} {'lookups/s':>12} "
              f"{'mean µs':>9} {'p50 µs':>8} {'p99 µs':>8}")
    print(header)
    print("-" * len(header))
    for name, case, call, args in rows:
        assert args, f"no {case} arguments for {name}"
        r = measure(call, args, opts.lookups)
        print(f"{name:<22} {case:<5} {r['per_s']:>12,.0f} {r['mean']:>9.2f} "
              f"{r['p50']:>8.2f} {r['p99']:>8.2f}")
    t0 = time.perf_counter()
    expired = active.expire(NOW + 600_001)
    print(f"\nexpire(): {expired:,} directives dropped in {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
