"""Throughput, latency and scaling of real workers on a local Apache Kafka.

    python bench/bench_pipeline.py [--format columnar|json] [--records 2000] [--batch 300]
                                   [--rates 20000,50000,100000] [--json F]

1. ceiling: one aiokafka consumer (no engine, no Faust) reads the same source records from 8
   partitions and decodes them (`columnar.decode`, or `orjson.loads` for JSON); samples/s.
2. one worker at saturation: a `quota-streams worker` consumes the records already on the
   source topic; samples/s from ready to every source and samples offset committed, and
   samples per worker CPU-second (the figure a busy, shared machine disturbs least).
3. latency (after 4.): samples produced at a steady rate, stamped with the wall clock, for each of
   --rates; p50/p99 of (directive record's append time - the event time it reports), and the
   highest rate whose p99 stays within 50 ms.
4. two workers: a second application (its own group, samples topic and table) reads the same
   records with two workers (before the latency runs add theirs). The machine has 2 cores, which the broker and this script share,
   so wall-clock scaling cannot be read here: each worker's CPU-seconds are. Two workers on
   dedicated cores would take max(CPU of each) where one takes its CPU, so the speed-up is
   `one worker's CPU-s / max(two workers' CPU-s)`.
Prints a table (and JSON with --json); compare figures within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.admin.config_topic import write_records  # noqa: E402
from app.devstack.procstat import cpu_seconds  # noqa: E402
from app.admin.entities import canonical_record  # noqa: E402
from app.engine.configs import parse_config_record  # noqa: E402
from app.engine.events import RequestEvent, parse_event  # noqa: E402
from app.intake import columnar  # noqa: E402
from app.devstack.launcher import LocalCluster, isolated_env  # noqa: E402
from app.kafka.offsets import end_offsets  # noqa: E402

PARTITIONS = 8
P99_TARGET_MS = 50
CONFIGS = [
    {"entity": {"user": "<default>"}, "quotas": {"producer_byte_rate": 2_000_000, "consumer_byte_rate": 4_000_000,
                                                  "request_percentage": 20, "controller_mutation_rate": 5}},
    {"entity": {"user": "<default>", "client_id": "<default>"}, "quotas": {"producer_byte_rate": 1_000_000}},
    {"entity": {"client_id": "<default>"}, "quotas": {"request_percentage": 30}},
    {"entity": {"user": "u1"}, "quotas": {"producer_byte_rate": 50_000}},
    {"entity": {"ip": "<default>"}, "quotas": {"connection_creation_rate": 50}},
    {"entity": {"broker": "<default>"}, "quotas": {"max_connection_creation_rate": 500}},
]


async def write_configs(bootstrap: str, topic: str) -> None:
    """The quotas, as `quota-streams quotas --alter` writes them (keyed: the topic is compacted)."""
    updates = [parse_config_record({"type": "quota_config", "v": 1, "ts": 0, **c})
               for c in CONFIGS]
    await write_records(bootstrap, topic, [(canonical_record(u), u) for u in updates], None)


def encode(events: list[dict[str, Any]], broker: int, fmt: str) -> bytes:
    if fmt == "json":
        return orjson.dumps({"type": "batch", "v": 1, "broker": broker, "events": events})
    parsed = [parse_event(e, broker) for e in events]
    assert all(type(e) is RequestEvent for e in parsed)
    return columnar.encode_events(parsed)  # type: ignore[arg-type]


def make_batches(records: int, batch: int, entities: int, start_ms: int, rng: random.Random,
                 fmt: str) -> list[bytes]:
    weights = [1.0 / (k ** 1.1) for k in range(1, entities + 1)]
    picks = rng.choices(range(entities), weights=weights, k=200_000)
    out = []
    i = 0
    for r in range(records):
        events = []
        for _ in range(batch):
            e = picks[i % len(picks)]
            i += 1
            events.append({"type": "request", "v": 1, "ts": start_ms + i // 20, "user": f"u{e % 3000}",
                           "client_id": f"c{e}", "api": "Produce" if e % 3 else "Fetch",
                           "bytes": 1000 + (e % 7) * 300, "thread_time_ms": 0.4, "network_time_ms": 0.05})
        out.append(encode(events, 1 + r % 3, fmt))
    return out


def samples_in(value: bytes) -> int:
    if columnar.is_columnar(value):
        return len(columnar.decode(value)[0])
    return len(orjson.loads(value)["events"])


async def produce(bootstrap: str, topic: str, values: list[bytes], rate: float | None = None,
                  batch: int = 1) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, max_batch_size=1 << 20)
    await producer.start()
    try:
        start = time.monotonic()
        for n, value in enumerate(values):
            await producer.send(topic, value, partition=n % PARTITIONS)
            if rate:
                due = start + (n + 1) * batch / rate
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        await producer.flush()
    finally:
        await producer.stop()


async def ceiling(bootstrap: str, topic: str, records: int) -> tuple[float, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                max_partition_fetch_bytes=8 << 20, fetch_max_bytes=64 << 20)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    samples = seen = 0
    start = time.perf_counter()
    while seen < records:
        for recs in (await consumer.getmany(timeout_ms=500, max_records=10_000)).values():
            for r in recs:
                samples += samples_in(r.value)
                seen += 1
    elapsed = time.perf_counter() - start
    await consumer.stop()
    return samples / elapsed, samples


async def wait_committed(bootstrap: str, group: str, topic: str, timeout: float,
                         nonempty: bool = True) -> float:
    """Time at which the group's committed offsets reach the end of every partition (of a
    topic with records in it, unless `nonempty` is False: the samples topic stays empty
    while one worker takes every sample in one stage)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ends = await end_offsets(bootstrap, tps)
            committed = {tp: (await consumer.committed(tp)) or 0 for tp in tps}
            if all(committed[tp] >= ends[tp] for tp in tps) and (sum(ends.values()) > 0
                                                                  or not nonempty):
                return time.perf_counter()
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
    raise TimeoutError("the workers did not commit all input in time")


async def latency(bootstrap: str, env: dict[str, str], rate: int, seconds: int, batch: int,
                  fmt: str) -> list[float]:
    rng = random.Random(3)
    start_ms = int(time.time() * 1000) + 1000  # events carry the time they are sent at
    values = []
    for r in range(rate * seconds // batch):
        t = start_ms + int(r * batch / rate * 1000)
        # 20 users each far over the 2 MB/s default producer quota: their throttle grows with
        # every event, so directives are frequent
        events = [{"type": "request", "v": 1, "ts": t, "user": f"lat{rng.randrange(20)}", "client_id": "c",
                   "api": "Produce", "bytes": 50_000} for _ in range(batch)]
        values.append(encode(events, 1, fmt))
    topic = env["QS_TOPIC_DIRECTIVES"]
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    await asyncio.sleep(max(0, start_ms / 1000 - time.time()))
    await produce(bootstrap, env["QS_TOPIC_REQUEST"], values, rate=rate, batch=batch)
    lat: list[float] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for recs in (await consumer.getmany(timeout_ms=500)).values():
            for r in recs:
                d = orjson.loads(r.value)
                if d["ts"] >= start_ms:
                    lat.append(r.timestamp - d["ts"])
    await consumer.stop()
    return lat


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def saturate(cluster: LocalCluster, bootstrap: str, env: dict[str, str], total: int
             ) -> tuple[float, list[float]]:
    """Start the cluster's workers on input already waiting; (samples/s, CPU-s per worker)."""
    cluster.start()
    cluster.wait_ready(timeout=120)
    ready = time.perf_counter()
    pids = [p.pid for p in cluster.procs.values()]
    cpu_ready = [cpu_seconds(pid) for pid in pids]
    asyncio.run(wait_committed(bootstrap, env["QS_APP_ID"], env["QS_TOPIC_REQUEST"], 900))
    done = asyncio.run(wait_committed(bootstrap, env["QS_APP_ID"], f"{env['QS_APP_ID']}-samples",
                                      900, nonempty=False))
    return total / (done - ready), [cpu_seconds(pid) - c for pid, c in zip(pids, cpu_ready)]


def add_load_options(ap: argparse.ArgumentParser, format_help: str) -> None:
    """The options of the load these benchmarks offer: its record format, size and entities."""
    ap.add_argument("--format", choices=("columnar", "json"), default="columnar",
                    help=f"{format_help} (default %(default)s)")
    ap.add_argument("--records", type=int, default=2000, help="batch records for saturation (default %(default)s)")
    ap.add_argument("--batch", type=int, default=300, help="samples per batch record (default %(default)s)")
    ap.add_argument("--entities", type=int, default=10_000, help="distinct (user, client) pairs (default %(default)s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_options(ap, "source record format")
    ap.add_argument("--rates", default="20000,50000,100000",
                    help="samples/s of the latency runs, comma-separated (default %(default)s)")
    ap.add_argument("--latency-seconds", type=int, default=10, help="length of each latency run (default %(default)s)")
    ap.add_argument("--config-grace-ms", type=int, default=20,
                    help="QS_CONFIG_GRACE_MS of the workers (default %(default)s, the default's): an "
                    "event is held until the config topic is read past its arrival plus this")
    ap.add_argument("--no-scaling", action="store_true", help="skip the two-worker run")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",") if r]

    work = Path(tempfile.mkdtemp(prefix="qs-bench-"))
    env = {**isolated_env("bench"), "QS_PARTITIONS": str(PARTITIONS), "QS_LOG_LEVEL": "info",
           "QS_STATE_DIR": str(work / "state"), "QS_CONFIG_GRACE_MS": str(args.config_grace_ms)}
    cluster = LocalCluster(1, work_dir=work, env=env)
    bootstrap = cluster.start_broker()
    figures: dict[str, Any] = {"format": args.format, "batch": args.batch,
                               "config_grace_ms": args.config_grace_ms}
    two: LocalCluster | None = None
    try:
        asyncio.run(write_configs(bootstrap, env["QS_TOPIC_CONFIGS"]))
        print(f"generating {args.records} {args.format} records x {args.batch} samples ...", file=sys.stderr)
        values = make_batches(args.records, args.batch, args.entities, int(time.time() * 1000),
                              random.Random(1), args.format)
        asyncio.run(produce(bootstrap, env["QS_TOPIC_REQUEST"], values))
        ceil_rate, total = asyncio.run(ceiling(bootstrap, env["QS_TOPIC_REQUEST"], args.records))
        print("one worker at saturation ...", file=sys.stderr)
        rate_1, (cpu_1,) = saturate(cluster, bootstrap, env, total)
        figures.update(ceiling_samples_per_s=ceil_rate, worker_samples_per_s=rate_1,
                       worker_over_ceiling=rate_1 / ceil_rate,
                       samples_per_worker_cpu_s=total / cpu_1)
        if not args.no_scaling:
            # before the latency runs add their records to the topic: the same input as above
            cluster.kill_worker(0, signal.SIGTERM)  # the broker stays up
            print("two workers at saturation (a second application) ...", file=sys.stderr)
            env2 = {**env, **isolated_env("bench2"), "QS_TOPIC_REQUEST": env["QS_TOPIC_REQUEST"],
                    "QS_TOPIC_CONFIGS": env["QS_TOPIC_CONFIGS"], "QS_STATE_DIR": str(work / "state2")}
            two = LocalCluster(2, bootstrap=bootstrap, work_dir=work / "two", env=env2)
            rate_2, cpus = saturate(two, bootstrap, env2, total)
            for index in (0, 1):
                two.kill_worker(index, signal.SIGTERM)
            figures.update(two_workers_samples_per_s=rate_2, two_workers_cpu_s=cpus,
                           one_worker_cpu_s=cpu_1, two_worker_speedup=cpu_1 / max(cpus))
            cluster.start()
            cluster.wait_ready(timeout=120)
        figures["latency"] = []
        for rate in rates:
            print(f"latency run: {rate} samples/s for {args.latency_seconds} s ...", file=sys.stderr)
            lat = asyncio.run(latency(bootstrap, env, rate, args.latency_seconds, 100, args.format))
            tail = lat[len(lat) * 3 // 4:]  # in arrival order: the run's last quarter
            figures["latency"].append({"rate": rate, "directives": len(lat), "p50_ms": pct(lat, 0.5),
                                       "p99_ms": pct(lat, 0.99), "last_quarter_p50_ms": pct(tail, 0.5)})
    finally:
        cluster.stop()
        if two is not None:
            two.stop()

    print(f"\n{args.format} source records of {args.batch} samples, {total:,} samples, "
          f"QS_CONFIG_GRACE_MS={args.config_grace_ms}\n")
    print(f"{'measure':<52}{'value':>14}")
    print(f"{'ceiling: aiokafka read+decode, samples/s':<52}{ceil_rate:>14,.0f}")
    print(f"{'one worker at saturation, samples/s':<52}{rate_1:>14,.0f}")
    print(f"{'worker / ceiling':<52}{rate_1 / ceil_rate:>14.2%}")
    print(f"{'samples per worker CPU-second':<52}{total / cpu_1:>14,.0f}")
    best = None
    for row in figures["latency"]:
        label = f"event -> directive p50 / p99 ms @ {row['rate']:,}/s"
        print(f"{label:<52}{row['p50_ms']:>7.0f} /{row['p99_ms']:>5.0f}")
        if row["p99_ms"] <= P99_TARGET_MS:
            best = row["rate"]
        if row["last_quarter_p50_ms"] > 2 * row["p50_ms"] + 50:
            print(f"  the worker fell behind {row['rate']:,} samples/s (latency kept growing)")
    print(f"{f'highest rate tried with p99 <= {P99_TARGET_MS} ms, samples/s':<52}"
          f"{(f'{best:,}' if best else 'none'):>14}")
    figures["highest_rate_p99_within_target"] = best
    if not args.no_scaling:
        print(f"{'two workers: CPU-s of each (one worker: ' + f'{cpu_1:.1f})':<52}"
              f"{' / '.join(f'{c:.1f}' for c in figures['two_workers_cpu_s']):>14}")
        print(f"{'two workers / one, on dedicated cores':<52}{figures['two_worker_speedup']:>13.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
