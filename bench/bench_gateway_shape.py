"""The gateways' shape: many gateways flushing small intervals of usage into one real worker.

    python bench/bench_gateway_shape.py [--gateways 16] [--flush-ms 5] [--principals 50]
                                        [--rate 20] [--hot 2] [--seconds 30] [--warmup 5]
                                        [--format columnar|json] [--aggregate] [--json F]

Each simulated gateway is what `quota-streams gateway` runs for its usage, without the proxy:
its own `UsageRecorder` (`--gateway-id` g) and `EventPublisher` on its own `AIOKafkaProducer`
(acks=all, linger = the flush interval), keyed `gateway/<g>`. Every `--flush-ms` it records the
requests its `--principals` made since its last flush (each principal `--rate` Produce requests
a second, at times spread over the interval, so an event waits for its flush as at a gateway)
and sends the flush: one record per event kind. `--hot` principals of each gateway offer about
five times the default per-user quota, so directives keep coming (nothing obeys them here).
One worker (`app.devstack.launcher.LocalCluster`) on a local Apache Kafka reads it all.

Prints, over the run after the warm-up: source records/s and samples/s written; the worker's
lag (source records not yet committed by its group, sampled each second: the largest, and at
the end); event -> directive latency, p50 and p99 (the directive record's append time minus the
event time it reports); and the events the gateways dropped. Targets are printed, never
asserted: 16 gateways at 5 ms with p99 <= 50 ms on one worker. The broker, the worker and this
process (every gateway) share the machine: compare figures within a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
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

PARTITIONS = 8
P99_TARGET_MS = 50
TARGET = "16 gateways at 5 ms, p99 <= 50 ms on one worker"
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


async def run(bootstrap: str, env: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    topics = {REQUEST: env["QS_TOPIC_REQUEST"], CONNECTION: env["QS_TOPIC_CONNECTION"],
              MUTATION: env["QS_TOPIC_MUTATION"]}
    directives = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    group = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=env["QS_APP_ID"],
                             enable_auto_commit=False)
    producers = [AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                  linger_ms=args.flush_ms) for _ in range(args.gateways)]
    clients: list[Any] = [directives, group, *producers]
    try:
        for client in clients:
            await client.start()
        dtps = [TopicPartition(env["QS_TOPIC_DIRECTIVES"], p) for p in range(PARTITIONS)]
        directives.assign(dtps)
        await directives.seek_to_end(*dtps)
        drops = Drops()
        gateways = [Gateway(g, args, p, topics, drops) for g, p in enumerate(producers)]
        started = time.monotonic()
        measure_from = started + args.warmup
        until = measure_from + args.seconds
        measure_ms = (time.time() + args.warmup) * 1000.0
        tasks = [asyncio.create_task(g.run(until)) for g in gateways]
        latencies: list[float] = []
        lags: list[int] = []
        counted: tuple[int, int] | None = None
        next_lag = measure_from
        while time.monotonic() < until:
            latencies += await directive_latencies(directives, measure_ms)
            now = time.monotonic()
            if counted is None and now >= measure_from:
                counted = (sum(g.publisher.records for g in gateways),
                           sum(g.publisher.events for g in gateways))
            if now >= next_lag:
                lags.append(await source_lag(group, env["QS_TOPIC_REQUEST"]))
                next_lag = now + 1.0
        await asyncio.gather(*tasks)
        assert counted is not None
        records = sum(g.publisher.records for g in gateways) - counted[0]
        samples = sum(g.publisher.events for g in gateways) - counted[1]
        for p in producers:
            await p.flush()
        deadline = time.monotonic() + 10.0  # what was sent last is still decided
        while time.monotonic() < deadline:
            latencies += await directive_latencies(directives, measure_ms)
        final_lag = await source_lag(group, env["QS_TOPIC_REQUEST"])
    finally:
        for client in clients:
            await client.stop()
    return {"records_per_s": records / args.seconds, "samples_per_s": samples / args.seconds,
            "samples_per_record": samples / records if records else 0.0,
            "lag_max": max(lags, default=0), "lag_end": final_lag, "directives": len(latencies),
            "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99),
            "dropped": dict(drops.events)}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateways", type=int, default=16, help="simulated gateways (default %(default)s)")
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
    env = {**isolated_env("shape"), "QS_PARTITIONS": str(PARTITIONS), "QS_LOG_LEVEL": "info",
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
        figures = asyncio.run(run(bootstrap, env, args))
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
    print(f"{'source lag, records (largest / at the end)':<48}"
          f"{figures['lag_max']:>8,} /{figures['lag_end']:>6,}")
    print(f"{'event -> directive p50 / p99 ms':<48}"
          f"{figures['p50_ms']:>8.0f} /{figures['p99_ms']:>6.0f}")
    print(f"{'directives measured':<48}{figures['directives']:>16,}")
    dropped = figures["dropped"]
    print(f"{'events dropped (' + ', '.join(REASONS) + ')':<48}"
          f"{' / '.join(str(dropped[r]) for r in REASONS):>16}")
    print(f"\ntarget (printed, not asserted): {TARGET}: "
          f"{'met' if figures['p99_ms'] <= P99_TARGET_MS else 'not met'} in this run")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
