"""Benchmark of the gateway: produce and fetch throughput and added latency, through the gateway
against straight to the broker, in one run.

Starts a local Kafka (or uses KAFKA_BOOTSTRAP_SERVERS), the product's topics and one
`quota-streams gateway` in front of it, with directives and its own quota engine on (no quota is
configured, so every request takes the whole path: decode, measure, engine, event). Then, for
each round, direct and through the gateway, each in a fresh client process (confluent-kafka,
the fastest client here, so the gateway is what is measured):

- produce: RECORDS records of SIZE bytes as fast as acks=all allows: MB/s, records/s, and
  Produce requests/s (librdkafka's own count);
- fetch: a consumer reading them back from the start: MB/s and Fetch requests/s;
- latency: the same producer paced at a half, a quarter and a tenth of the direct produce rate:
  p50 and p99 from send to acknowledgement per record (linger.ms=5 in both paths); the
  gateway's added latency is the difference from direct.

Throughput is printed per path and as a ratio (target: >= 70% of direct); latency as the p50/p99
added (target: <= 2 ms at p99). Both share two cores with the broker and the client, so compare
within a run.

The gateway's cost is printed as CPU milliseconds per MB moved: the CPU time (user + system,
from /proc) of the gateway process over each produce and fetch through it, divided by the record
bytes moved. It is the unit Kroxylicious publishes (millicores per MB/s: 4-30 for its proxy;
Conduktor's gateway ~70-100), and read as cores per GB/s it is the sizing rule. Run:

    python bench/bench_gateway.py [--records 200000] [--size 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: Produce rates the latency is measured at, as shares of the direct produce throughput.
LATENCY_SHARES = (0.5, 0.25, 0.1)
sys.path.insert(0, str(ROOT))

from app.devstack.procstat import cpu_seconds  # noqa: E402

# ------------------------------------------------------------------------- one measurement


def measure_produce(bootstrap: str, topic: str, records: int, size: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    stats: dict[str, Any] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "batch.size": 1_000_000, "statistics.interval.ms": 500,
                         "stats_cb": lambda s: stats.update(json.loads(s))})
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    producer.poll(0.6)  # a last statistics callback
    return {"seconds": elapsed, "bytes": records * size, "records": records,
            "requests": _requests(stats, "Produce")}


def measure_fetch(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    stats: dict[str, Any] = {}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "statistics.interval.ms": 500,
                         "stats_cb": lambda s: stats.update(json.loads(s))})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = nbytes = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < records and time.perf_counter() < deadline:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
    elapsed = time.perf_counter() - start
    consumer.poll(0.6)
    consumer.close()
    return {"seconds": elapsed, "bytes": nbytes, "records": got,
            "requests": _requests(stats, "Fetch")}


def measure_latency(bootstrap: str, topic: str, rate: float, seconds: float, size: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "batch.size": 1_000_000})
    latencies: list[float] = []
    value = b"y" * size

    def done(err: Any, msg: Any, sent: float) -> None:
        if err is None:
            latencies.append((time.perf_counter() - sent) * 1000)

    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < seconds:
        due = start + n / rate
        now = time.perf_counter()
        if now < due:
            producer.poll(min(due - now, 0.001))
            continue
        sent = time.perf_counter()
        producer.produce(topic, value, on_delivery=lambda e, m, s=sent: done(e, m, s))
        producer.poll(0)
        n += 1
    producer.flush(30)
    latencies = latencies[len(latencies) // 10:]  # the first tenth warms connections up
    qs = statistics.quantiles(latencies, n=100)
    return {"sent": n, "p50": qs[49], "p99": qs[98]}


def _requests(stats: dict[str, Any], api: str) -> int:
    """Requests of one API sent to the brokers (librdkafka's per-broker request counts)."""
    return sum(b.get("req", {}).get(api, 0) for b in stats.get("brokers", {}).values())


def run_measure(kind: str, bootstrap: str, topic: str, *args: str,
                gateway_pid: int | None = None) -> dict[str, Any]:
    """One measurement in a fresh process; with `gateway_pid`, the CPU seconds that process
    used meanwhile (`gateway_cpu_s`)."""
    cpu = None if gateway_pid is None else cpu_seconds(gateway_pid)
    out = subprocess.run([sys.executable, __file__, "--measure", kind, bootstrap, topic, *args],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed: {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if gateway_pid is not None and cpu is not None:
        result["gateway_cpu_s"] = cpu_seconds(gateway_pid) - cpu
    return result


def cpu_ms_per_mb(results: list[dict[str, Any]]) -> float:
    """The gateway's CPU milliseconds per MB (10^6 bytes) of records moved, over `results`;
    the same number is its millicores per MB/s, and its cores per GB/s."""
    moved = sum(r["bytes"] for r in results)
    return sum(r["gateway_cpu_s"] for r in results) * 1000 / (moved / 1e6) if moved else 0.0


# ------------------------------------------------------------------------------- the bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1000, help="record value bytes")
    parser.add_argument("--rounds", type=int, default=2, help="alternating direct/gateway rounds")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--gateway-args", nargs=argparse.REMAINDER, default=[],
                        help="the rest of the line goes to `quota-streams gateway`")
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, bootstrap, topic, *rest = args.measure
        if kind == "produce":
            result = measure_produce(bootstrap, topic, int(rest[0]), int(rest[1]))
        elif kind == "fetch":
            result = measure_fetch(bootstrap, topic, int(rest[0]))
        else:
            result = measure_latency(bootstrap, topic, float(rest[0]), float(rest[1]), int(rest[2]))
        print(json.dumps(result))
        return 0

    from app.kafka.topics import create_topics_sync
    from app.devstack.launcher import LocalCluster, isolated_env

    tag = uuid.uuid4().hex[:6]
    env = {**isolated_env(f"bench-{tag}"), "QS_PARTITIONS": "1"}
    cluster = LocalCluster(0, env=env)
    try:
        print("starting the broker and a gateway ...", file=sys.stderr)
        cluster.start()
        gateway = cluster.start_gateway(*args.gateway_args)
        paths = {"direct": str(cluster.bootstrap), "gateway": gateway.bootstrap}
        results: dict[str, dict[str, list[dict[str, Any]]]] = {p: {"produce": [], "fetch": []} for p in paths}
        for round_ in range(args.rounds):
            for path, bootstrap in paths.items():
                pid = gateway.proc.pid if path == "gateway" else None
                topic = f"bench-{tag}-{path}-{round_}"
                create_topics_sync(str(cluster.bootstrap), [(topic, 1, {})])
                print(f"round {round_ + 1}: {path} produce", file=sys.stderr)
                results[path]["produce"].append(run_measure(
                    "produce", bootstrap, topic, str(args.records), str(args.size),
                    gateway_pid=pid))
                print(f"round {round_ + 1}: {path} fetch", file=sys.stderr)
                results[path]["fetch"].append(run_measure(
                    "fetch", bootstrap, topic, str(args.records), gateway_pid=pid))
        direct_rate = statistics.median(r["records"] / r["seconds"] for r in results["direct"]["produce"])
        latency: dict[float, dict[str, dict[str, Any]]] = {}
        for share in LATENCY_SHARES:
            for path, bootstrap in paths.items():
                topic = f"bench-{tag}-{path}-latency-{share}"
                create_topics_sync(str(cluster.bootstrap), [(topic, 1, {})])
                rate = direct_rate * share
                print(f"{path} latency at {rate:,.0f} records/s", file=sys.stderr)
                latency.setdefault(share, {})[path] = run_measure(
                    "latency", bootstrap, topic, str(rate), str(args.latency_seconds), str(args.size))
        report(results, latency, direct_rate, args)
    finally:
        cluster.stop()
    return 0


def report(results: dict[str, Any], latency: dict[float, Any], direct_rate: float,
           args: argparse.Namespace) -> None:
    def med(path: str, kind: str, f: Any) -> float:
        return statistics.median(f(r) for r in results[path][kind])

    print(f"\ngateway benchmark: {args.records:,} records of {args.size} B, {args.rounds} rounds "
          f"(medians), confluent-kafka {_version()}, os.cpu_count()={os.cpu_count()}")
    print(f"{'':18}{'direct':>14}{'gateway':>14}{'ratio':>8}")
    rows = [
        ("produce MB/s", "produce", lambda r: r["bytes"] / r["seconds"] / 1e6),
        ("produce req/s", "produce", lambda r: r["requests"] / r["seconds"]),
        ("fetch MB/s", "fetch", lambda r: r["bytes"] / r["seconds"] / 1e6),
        ("fetch req/s", "fetch", lambda r: r["requests"] / r["seconds"]),
    ]
    for name, kind, f in rows:
        d, g = med("direct", kind, f), med("gateway", kind, f)
        print(f"{name:18}{d:>14,.1f}{g:>14,.1f}{g / d if d else 0:>8.2f}")
    gateway = results["gateway"]
    produce, fetch = cpu_ms_per_mb(gateway["produce"]), cpu_ms_per_mb(gateway["fetch"])
    both = cpu_ms_per_mb(gateway["produce"] + gateway["fetch"])
    print(f"\ngateway CPU ms per MB moved (= millicores per MB/s = cores per GB/s): produce "
          f"{produce:.1f}, fetch {fetch:.1f}, both {both:.1f} (Kroxylicious publishes 4-30, "
          f"Conduktor ~70-100); one core moves about {1000 / both if both else 0:,.0f} MB/s")
    print(f"\nproduce latency per record (ms), acks=all, linger.ms=5, at shares of the direct "
          f"produce rate ({direct_rate:,.0f} records/s):")
    print(f"{'share':>6}{'records/s':>11}{'direct p50':>12}{'p99':>8}{'gateway p50':>13}{'p99':>8}"
          f"{'added p50':>11}{'p99':>8}")
    for share, paths in latency.items():
        d, g = paths["direct"], paths["gateway"]
        print(f"{share:>6.2f}{direct_rate * share:>11,.0f}{d['p50']:>12.2f}{d['p99']:>8.2f}"
              f"{g['p50']:>13.2f}{g['p99']:>8.2f}{g['p50'] - d['p50']:>11.2f}{g['p99'] - d['p99']:>8.2f}")


def _version() -> str:
    import confluent_kafka

    return str(confluent_kafka.version()[0])


if __name__ == "__main__":
    sys.exit(main())
