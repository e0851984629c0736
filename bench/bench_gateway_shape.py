"""The gateways' shape: many gateways flushing small intervals of usage into one real worker.

    python bench/bench_gateway_shape.py [--gateways 16] [--procs 2] [--flush-ms 5]
                                        [--principals 50] [--rate 20] [--hot 2] [--seconds 30]
                                        [--warmup 5] [--format columnar|json] [--aggregate]
                                        [--json F]

Each simulated gateway is what `quota-streams gateway` runs for its usage, without the proxy:
its own `UsageRecorder` (`--gateway-id` g) and `EventPublisher` on its own `AIOKafkaProducer`
(acks=all, linger = the flush interval), keyed `gateway/<g>`. Every `--flush-ms` it records the
requests its `--principals` made since its last flush (each principal `--rate` Produce requests
a second, at times spread over the interval, so an event waits for its flush as at a gateway)
and sends the flush: one record per event kind. `--hot` principals of each gateway offer about
five times the default per-user quota, so directives keep coming (nothing obeys them here).
The gateways run in `--procs` processes of their own (as real gateways would, off the
worker's interpreter). One worker (`app.devstack.launcher.LocalCluster`) on a local Apache
Kafka reads it all.

Prints, over the run after the warm-up: source records/s and samples/s written; the worker's
lag (source records not yet committed by its group, sampled each second: the largest, and at
the end); event -> directive latency, p50 and p99 (the directive record's append time minus the
event time it reports); the worker's CPU (user + system, its whole process) per source record
and per sample; and the events the gateways dropped. Targets are printed, never asserted: 16
gateways at 5 ms with p99 <= 50 ms and lag <= 100 records on one worker. The broker, the worker
and the gateways share the machine: compare figures within a run. The worker takes its
settings from this environment (`QS_CONFIG_POLL_MS=2 python bench/bench_gateway_shape.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.admin.config_topic import write_records  # noqa: E402
from app.admin.entities import canonical_record  # noqa: E402
from app.engine.configs import parse_config_record  # noqa: E402
from app.devstack.launcher import LocalCluster, isolated_env  # noqa: E402
from app.usage.drops import REASONS, Drops  # noqa: E402
from app.usage.publisher import EventPublisher, Source  # noqa: E402
from app.usage.recorder import CONNECTION, MUTATION, REQUEST, UsageRecorder  # noqa: E402
from app.usage.records import DEFAULT_RECORD_BYTES, RecordEncoder  # noqa: E402
from bench_pipeline import cpu_seconds  # noqa: E402

PARTITIONS = 8
P99_TARGET_MS = 50
LAG_TARGET = 100
TARGET = "16 gateways at 5 ms, p99 <= 50 ms, lag <= 100 records on one worker"
USER_QUOTA = 1_000_000  # bytes/s, every user's (the default user quota)
REQUEST_BYTES = 2_000  # a plain principal's Produce request
CONFIGS = [
    {"entity": {"user": "<default>"}, "quotas": {"producer_byte_rate": USER_QUOTA,
                                                  "request_percentage": 50}},
    {"entity": {"client_id": "<default>"}, "quotas": {"request_percentage": 30}},
]


class Gateway:
    """One simulated gateway: its recorder, publisher and load."""

    def __init__(self, gid: int, args: argparse.Namespace, producer: AIOKafkaProducer,
                 topics: dict[str, str], drops: Drops) -> None:
        self.gid = gid
        self.args = args
        self.rng = random.Random(gid)
        self.usage = UsageRecorder(args.aggregate, gateway=gid, span_ms=args.flush_ms,
                                   drops=drops)
        self.publisher = EventPublisher(producer, topics, RecordEncoder(
            args.format == "columnar", DEFAULT_RECORD_BYTES, drops))
        self.source = Source.gateway(gid)
        # a hot principal offers five times the user quota in requests of this size
        self.hot_bytes = int(5 * USER_QUOTA / args.rate)

    def record(self, since_ms: float, now_ms: float) -> None:
        """The requests of every principal in [since_ms, now_ms)."""
        args, rng, usage = self.args, self.rng, self.usage
        span = now_ms - since_ms
        expected = args.rate * span / 1000.0
        for p in range(args.principals):
            n = int(expected) + (1 if rng.random() < expected - int(expected) else 0)
            nbytes = self.hot_bytes if p < args.hot else REQUEST_BYTES
            for _ in range(n):
                ts = int(since_ms + rng.random() * span)
                usage.request(1 + p % 3, ts, "PLAINTEXT", f"g{self.gid}-u{p}", f"app-{p % 5}",
                              f"10.0.{self.gid}.{p}", "Produce", nbytes, 0.4, 0.0)

    async def run(self, until: float) -> None:
        """Record and flush every flush interval until `until` (monotonic), as a gateway."""
        interval = self.args.flush_ms / 1000.0
        await asyncio.sleep(self.rng.random() * interval)  # gateways are not in step
        last = time.time() * 1000.0
        while time.monotonic() < until:
            await asyncio.sleep(interval)
            now = time.time() * 1000.0
            self.record(last, now)
            last = now
            await self.publisher.send(self.source, self.usage.flush())


async def write_configs(bootstrap: str, topic: str) -> None:
    """The quotas, as `quota-streams quotas --alter` writes them (keyed: the topic is compacted)."""
    updates = [parse_config_record({"type": "quota_config", "v": 1, "ts": 0, **c})
               for c in CONFIGS]
    await write_records(bootstrap, topic, [(canonical_record(u), u) for u in updates], None)


def worker_metrics(port: int) -> dict[str, float]:
    """The worker's /metrics as {sample name with labels: value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def requests_by_api(metrics: dict[str, float]) -> dict[str, float]:
    prefix = 'quota_streams_kafka_requests_total{api="'
    return {k[len(prefix):-2]: v for k, v in metrics.items() if k.startswith(prefix)}


def taken_lag(metrics: dict[str, float], topic: str) -> int:
    """Source records past the worker's last take, by its own gauge (exported each flush)."""
    prefix = f'quota_streams_consumer_lag_records{{partition='
    return int(sum(v for k, v in metrics.items()
                   if k.startswith(prefix) and f'topic="{topic}"' in k))


async def source_lag(group: AIOKafkaConsumer, topic: str) -> int:
    """Source records the worker's group (`group`: a consumer of that group id, not
    subscribed) has not committed yet."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = await group.end_offsets(tps)
    lag = 0
    for tp in tps:
        lag += max(0, ends[tp] - ((await group.committed(tp)) or 0))
    return lag


async def directive_latencies(directives: AIOKafkaConsumer, since_ms: float) -> list[float]:
    """Append time minus event time of the directives fetched now, for events since `since_ms`."""
    out = []
    for recs in (await directives.getmany(timeout_ms=200)).values():
        for r in recs:
            d = orjson.loads(r.value)
            if "ts" in d and d["ts"] >= since_ms:
                out.append(float(r.timestamp - d["ts"]))
    return out


async def gateways(bootstrap: str, topics: dict[str, str], gids: list[int],
                   args: argparse.Namespace, until_wall: float, counts: Any) -> None:
    """Some of the gateways, each on its own producer, in one process; `counts` gets
    (records, events, dropped by reason) once at the measurement's start and once at its end."""
    producers = [AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                  linger_ms=args.flush_ms) for _ in gids]
    for producer in producers:
        await producer.start()
    try:
        drops = Drops()
        sims = [Gateway(g, args, p, topics, drops) for g, p in zip(gids, producers)]
        until = time.monotonic() + (until_wall - time.time())
        tasks = [asyncio.create_task(g.run(until)) for g in sims]
        await asyncio.sleep(max(0.0, until_wall - args.seconds - time.time()))
        counts.put((sum(g.publisher.records for g in sims), sum(g.publisher.events for g in sims),
                    {}))
        await asyncio.gather(*tasks)
        counts.put((sum(g.publisher.records for g in sims), sum(g.publisher.events for g in sims),
                    dict(drops.events)))
        for p in producers:
            await p.flush()
    finally:
        for p in producers:
            await p.stop()


def gateway_process(bootstrap: str, topics: dict[str, str], gids: list[int],
                    args: argparse.Namespace, until_wall: float, counts: Any) -> None:
    asyncio.run(gateways(bootstrap, topics, gids, args, until_wall, counts))


async def run(bootstrap: str, env: dict[str, str], args: argparse.Namespace,
              worker_pid: int, worker_port: int) -> dict[str, Any]:
    topics = {REQUEST: env["QS_TOPIC_REQUEST"], CONNECTION: env["QS_TOPIC_CONNECTION"],
              MUTATION: env["QS_TOPIC_MUTATION"]}
    directives = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    group = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=env["QS_APP_ID"],
                             enable_auto_commit=False)
    clients: list[Any] = [directives, group]
    ctx = multiprocessing.get_context("spawn")
    counts = ctx.Queue()
    procs = []
    try:
        for client in clients:
            await client.start()
        dtps = [TopicPartition(env["QS_TOPIC_DIRECTIVES"], p) for p in range(PARTITIONS)]
        directives.assign(dtps)
        await directives.seek_to_end(*dtps)
        started = time.time() + 2.0  # the gateway processes' start-up
        measure_ms = (started + args.warmup) * 1000.0
        until_wall = started + args.warmup + args.seconds
        for i in range(args.procs):
            gids = list(range(i, args.gateways, args.procs))
            proc = ctx.Process(target=gateway_process,
                               args=(bootstrap, topics, gids, args, until_wall, counts))
            proc.start()
            procs.append(proc)
        latencies: list[float] = []
        lags: list[int] = []
        taken: list[int] = []
        cpu0 = cpu1 = None
        requests0: dict[str, float] = {}
        next_lag = measure_ms / 1000.0
        while time.time() < until_wall:
            latencies += await directive_latencies(directives, measure_ms)
            now = time.time()
            if cpu0 is None and now * 1000.0 >= measure_ms:
                cpu0 = cpu_seconds(worker_pid)
                requests0 = requests_by_api(worker_metrics(worker_port))
            if now >= next_lag and now * 1000.0 >= measure_ms:
                lags.append(await source_lag(group, env["QS_TOPIC_REQUEST"]))
                taken.append(taken_lag(worker_metrics(worker_port), env["QS_TOPIC_REQUEST"]))
                next_lag = now + 1.0
        cpu1 = cpu_seconds(worker_pid)
        requests1 = requests_by_api(worker_metrics(worker_port))
        firsts = [counts.get(timeout=30) for _ in procs]
        lasts = [counts.get(timeout=30) for _ in procs]
        records = sum(r for r, _, _ in lasts) - sum(r for r, _, _ in firsts)
        samples = sum(e for _, e, _ in lasts) - sum(e for _, e, _ in firsts)
        dropped = {reason: sum(d.get(reason, 0) for _, _, d in lasts) for reason in REASONS}
        for proc in procs:
            proc.join(timeout=30)
        deadline = time.monotonic() + 10.0  # what was sent last is still decided
        while time.monotonic() < deadline:
            latencies += await directive_latencies(directives, measure_ms)
        final_lag = await source_lag(group, env["QS_TOPIC_REQUEST"])
    finally:
        for client in clients:
            await client.stop()
        for proc in procs:
            if proc.is_alive():
                proc.kill()
    cpu = (cpu1 - cpu0) if cpu0 is not None else float("nan")
    kafka_requests = {api: n - requests0.get(api, 0.0) for api, n in requests1.items()
                      if n > requests0.get(api, 0.0)}
    return {"records_per_s": records / args.seconds, "samples_per_s": samples / args.seconds,
            "samples_per_record": samples / records if records else 0.0,
            "lag_max": max(lags, default=0), "lag_end": final_lag, "directives": len(latencies),
            "taken_lag_max": max(taken, default=0),
            "kafka_requests": kafka_requests,
            "kafka_requests_per_record": (sum(kafka_requests.values()) / records if records
                                          else float("nan")),
            "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99),
            "worker_cpu_s": cpu,
            "worker_cpu_us_per_record": 1e6 * cpu / records if records else float("nan"),
            "worker_cpu_us_per_sample": 1e6 * cpu / samples if samples else float("nan"),
            "dropped": dropped}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateways", type=int, default=16, help="simulated gateways (default %(default)s)")
    ap.add_argument("--procs", type=int, default=2,
                    help="processes the gateways are spread over (default %(default)s)")
    ap.add_argument("--flush-ms", type=int, default=5, help="their flush interval (default %(default)s)")
    ap.add_argument("--principals", type=int, default=50, help="principals per gateway (default %(default)s)")
    ap.add_argument("--rate", type=float, default=20.0,
                    help="Produce requests a second per principal (default %(default)s)")
    ap.add_argument("--hot", type=int, default=2,
                    help="principals per gateway over their quota (default %(default)s)")
    ap.add_argument("--seconds", type=int, default=30, help="measured seconds (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=5, help="seconds before measuring (default %(default)s)")
    ap.add_argument("--format", choices=("columnar", "json"), default="columnar",
                    help="request record format (default %(default)s)")
    ap.add_argument("--aggregate", action="store_true", help="the gateways' --aggregate")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="qs-bench-shape-"))
    # the worker's settings from this environment (QS_CONFIG_POLL_MS=2 ...), but its own topics
    env = {**{k: v for k, v in os.environ.items() if k.startswith("QS_")},
           **isolated_env("shape"), "QS_PARTITIONS": str(PARTITIONS), "QS_LOG_LEVEL": "info",
           "QS_STATE_DIR": str(work / "state")}
    cluster = LocalCluster(1, work_dir=work, env=env)
    try:
        bootstrap = cluster.start_broker()
        asyncio.run(write_configs(bootstrap, env["QS_TOPIC_CONFIGS"]))
        cluster.start()
        cluster.wait_ready(timeout=120)
        print(f"{args.gateways} gateways x {args.principals} principals at {args.rate:g} req/s, "
              f"flush {args.flush_ms} ms, {args.format}{', aggregated' if args.aggregate else ''}"
              f": {args.warmup} s warm-up, {args.seconds} s measured ...", file=sys.stderr)
        figures = asyncio.run(run(bootstrap, env, args, cluster.procs[0].pid,
                                  cluster.ports[0]))
    finally:
        cluster.stop()
    figures.update(gateways=args.gateways, flush_ms=args.flush_ms, principals=args.principals,
                   rate=args.rate, format=args.format, aggregate=args.aggregate)

    print(f"\n{args.gateways} gateways, flush {args.flush_ms} ms, {args.principals} principals "
          f"each at {args.rate:g} requests/s, {args.format}\n")
    print(f"{'measure':<48}{'value':>16}")
    print(f"{'source records/s':<48}{figures['records_per_s']:>16,.0f}")
    print(f"{'samples/s':<48}{figures['samples_per_s']:>16,.0f}")
    print(f"{'samples per record':<48}{figures['samples_per_record']:>16,.1f}")
    print(f"{'source records not yet taken (largest, 1 s gauge)':<48}"
          f"{figures['taken_lag_max']:>16,}")
    print(f"{'not yet committed (largest / at the end)':<48}"
          f"{figures['lag_max']:>8,} /{figures['lag_end']:>6,}")
    print(f"{'event -> directive p50 / p99 ms':<48}"
          f"{figures['p50_ms']:>8.0f} /{figures['p99_ms']:>6.0f}")
    print(f"{'directives measured':<48}{figures['directives']:>16,}")
    per_api = ", ".join(f"{api} {n / args.seconds:,.0f}" for api, n in
                        sorted(figures["kafka_requests"].items(), key=lambda kv: -kv[1])[:4])
    print(f"{'worker Kafka requests per source record':<48}"
          f"{figures['kafka_requests_per_record']:>16.2f}")
    print(f"{'  per second, largest APIs':<48}{per_api:>16}")
    print(f"{'worker CPU, cores (user + system)':<48}"
          f"{figures['worker_cpu_s'] / args.seconds:>16.2f}")
    print(f"{'worker CPU-µs per source record / per sample':<48}"
          f"{figures['worker_cpu_us_per_record']:>8.0f} /"
          f"{figures['worker_cpu_us_per_sample']:>6.1f}")
    dropped = figures["dropped"]
    print(f"{'events dropped (' + ', '.join(REASONS) + ')':<48}"
          f"{' / '.join(str(dropped[r]) for r in REASONS):>16}")
    print(f"\ntarget (printed, not asserted): {TARGET}: "
          f"{'met' if figures['p99_ms'] <= P99_TARGET_MS and figures['taken_lag_max'] <= LAG_TARGET else 'not met'}"
          " in this run")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
