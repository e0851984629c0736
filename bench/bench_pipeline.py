"""Throughput and latency of one worker on the embedded broker, against a plain-consumer ceiling.

    python bench/bench_pipeline.py [--records 2000] [--batch 300] [--entities 10000]

1. ceiling: one aiokafka consumer (no engine, no Faust) reads and decodes the same batch
   records from 8 partitions; samples/s.
2. saturation: one `quota-streams worker` consumes the same records from the source topic;
   samples/s from the first record to the samples topic's offsets all committed.
3. latency: events produced at a steady --rate samples/s stamped with the wall clock; p50/p99
   of (directive record's append time - the event time it reports).
Prints a table; figures vary with the machine's load, so compare the ratio within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.launcher import LocalCluster  # noqa: E402
from tables.recovery import confirmed_end_offsets  # noqa: E402

PARTITIONS = 8
CONFIGS = [
    {"entity": {"user": "<default>"}, "quotas": {"producer_byte_rate": 2_000_000, "consumer_byte_rate": 4_000_000,
                                                  "request_percentage": 20, "controller_mutation_rate": 5}},
    {"entity": {"user": "<default>", "client_id": "<default>"}, "quotas": {"producer_byte_rate": 1_000_000}},
    {"entity": {"client_id": "<default>"}, "quotas": {"request_percentage": 30}},
    {"entity": {"user": "u1"}, "quotas": {"producer_byte_rate": 50_000}},
    {"entity": {"ip": "<default>"}, "quotas": {"connection_creation_rate": 50}},
    {"entity": {"broker": "<default>"}, "quotas": {"max_connection_creation_rate": 500}},
]


def zipf_picker(n: int, s: float, rng: random.Random) -> list[int]:
    weights = [1.0 / (k ** s) for k in range(1, n + 1)]
    return rng.choices(range(n), weights=weights, k=200_000)


def make_batches(records: int, batch: int, entities: int, start_ms: int, rng: random.Random) -> list[bytes]:
    picks = zipf_picker(entities, 1.1, rng)
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
        out.append(orjson.dumps({"type": "batch", "v": 1, "broker": 1 + r % 3, "events": events}))
    return out


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
                samples += len(orjson.loads(r.value)["events"])
                seen += 1
    elapsed = time.perf_counter() - start
    await consumer.stop()
    return samples / elapsed, samples


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): the figure a busy, shared
    machine disturbs least, unlike wall-clock rates."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_committed(bootstrap: str, group: str, topic: str, timeout: float) -> float:
    """Time at which the group's committed offsets reach the confirmed end of every partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ends = await confirmed_end_offsets(bootstrap, tps)
            committed = {tp: (await consumer.committed(tp)) or 0 for tp in tps}
            if all(committed[tp] >= ends[tp] for tp in tps) and sum(ends.values()) > 0:
                return time.perf_counter()
            await asyncio.sleep(0.2)
    finally:
        await consumer.stop()
    raise TimeoutError("the worker did not commit all input in time")


async def latency(bootstrap: str, env: dict[str, str], rate: int, seconds: int, batch: int) -> list[float]:
    rng = random.Random(3)
    start_ms = int(time.time() * 1000) + 1000  # events carry the time they are sent at
    values = []
    for r in range(rate * seconds // batch):
        t = start_ms + int(r * batch / rate * 1000)
        # 20 users each far over the 2 MB/s default producer quota: their throttle grows with
        # every event, so directives are frequent (about a third as many as samples at 20k/s)
        events = [{"type": "request", "v": 1, "ts": t, "user": f"lat{rng.randrange(20)}", "client_id": "c",
                   "api": "Produce", "bytes": 50_000} for _ in range(batch)]
        values.append(orjson.dumps({"type": "batch", "v": 1, "broker": 1, "events": events}))
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
                lat.append(r.timestamp - d["ts"])
    await consumer.stop()
    return lat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000, help="batch records for saturation (default %(default)s)")
    ap.add_argument("--batch", type=int, default=300, help="samples per batch record (default %(default)s)")
    ap.add_argument("--entities", type=int, default=10_000, help="distinct (user, client) pairs (default %(default)s)")
    ap.add_argument("--rate", type=int, default=20_000, help="samples/s for the latency run (default %(default)s)")
    ap.add_argument("--latency-seconds", type=int, default=10, help="length of the latency run (default %(default)s)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="qs-bench-"))
    env = {"QS_APP_ID": "bench", "QS_PARTITIONS": str(PARTITIONS), "QS_LOG_LEVEL": "info",
           "QS_STATE_DIR": str(work / "state")}
    cluster = LocalCluster(1, work_dir=work, env=env)
    bootstrap = cluster.start_broker()
    env.update({k: v for k, v in cluster.worker_env(0).items() if k.startswith("QS_TOPIC")})
    for key, value in (("QS_TOPIC_REQUEST", "quota.events.request"), ("QS_TOPIC_DIRECTIVES", "quota.directives")):
        env.setdefault(key, value)
    try:
        async def setup() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await producer.start()
            for c in CONFIGS:
                await producer.send_and_wait("quota.configs", orjson.dumps({"type": "quota_config", "v": 1, "ts": 0, **c}))
            await producer.stop()
        asyncio.run(setup())
        print(f"generating {args.records} records x {args.batch} samples ...", file=sys.stderr)
        values = make_batches(args.records, args.batch, args.entities, int(time.time() * 1000), random.Random(1))
        asyncio.run(produce(bootstrap, "quota.events.request", values))
        ceil_rate, total = asyncio.run(ceiling(bootstrap, "quota.events.request", args.records))
        print("starting the worker ...", file=sys.stderr)
        start = time.perf_counter()
        cluster.start()
        cluster.wait_ready(timeout=120)
        ready = time.perf_counter()
        pid = cluster.procs[0].pid
        cpu_ready = cpu_seconds(pid)
        asyncio.run(wait_committed(bootstrap, "bench", "quota.events.request", 600))
        done = asyncio.run(wait_committed(bootstrap, "bench", "bench-samples", 600))
        worker_rate = total / (done - ready)
        worker_cpu = cpu_seconds(pid) - cpu_ready
        print(f"latency run: {args.rate} samples/s for {args.latency_seconds} s ...", file=sys.stderr)
        lat = asyncio.run(latency(bootstrap, env, args.rate, args.latency_seconds, 100))
    finally:
        cluster.stop()
    tail = sorted(lat[len(lat) * 3 // 4:])  # directives in arrival order: the run's last quarter
    lat.sort()
    p = lambda q, xs=lat: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")  # noqa: E731
    print(f"\n{'measure':<46}{'value':>14}")
    print(f"{'ceiling: aiokafka read+decode, samples/s':<46}{ceil_rate:>14,.0f}")
    print(f"{'one worker at saturation, samples/s':<46}{worker_rate:>14,.0f}")
    print(f"{'worker / ceiling':<46}{worker_rate / ceil_rate:>14.2%}")
    print(f"{'samples per worker CPU-second':<46}{total / worker_cpu:>14,.0f}")
    print(f"{'worker start to ready, s':<46}{ready - start:>14.1f}")
    print(f"{'latency run directives':<46}{len(lat):>14}")
    print(f"{'event -> directive p50 ms @ ' + str(args.rate) + '/s':<46}{p(0.5):>14.0f}")
    print(f"{'event -> directive p99 ms @ ' + str(args.rate) + '/s':<46}{p(0.99):>14.0f}")
    print(f"{'  p50 ms over the last quarter of the run':<46}{p(0.5, tail):>14.0f}")
    if p(0.5, tail) > 2 * p(0.5) + 50:
        print(f"the worker fell behind {args.rate} samples/s (latency kept growing): try a lower --rate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
