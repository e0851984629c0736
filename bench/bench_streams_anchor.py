"""The worker against Kafka Streams, the system it claims to match, on the same box and input.

    python bench/bench_streams_anchor.py [--format columnar|json] [--records 2000] [--batch 300]
                                         [--rate 20000] [--latency-seconds 10] [--json F]

The anchor (jvm/streams-anchor, built by `make setup`) is a Kafka Streams application that
computes the worker's per-entity windows: it decodes the same request records (JSON or
columnar), re-keys the samples by broker and user through a repartition topic as the worker
re-keys them to its samples topic, and charges each Produce's bytes per (user, client id) and
each Fetch's bytes per user, on each broker as the worker's default scope does, to Kafka's
sampled rate (11 samples of 1 s, the engine's arithmetic), publishing a directive-like record
under the worker's rule when a rate is over its limit. Limits are the
worker's under this benchmark's configs (bench_pipeline's: 1,000,000 B/s producer per user and
client, 4,000,000 B/s consumer per user). The worker does more per sample: it also resolves
the configs per principal and charges request time; the table says so.

1. saturation: bench_pipeline's input (--records batch records of --batch samples) is written
   once to the request topic; the worker, then the anchor, each start on that backlog alone.
   samples/s from ready to every source and re-keyed offset committed (both commit every 1 s),
   and samples per CPU-second of the process (user + system) over the same span.
2. latency: each system started afresh on its own empty request topic (so neither reads the
   other's records); samples produced at --rate, stamped with the wall clock, for
   --warmup-seconds (not counted: the JVM compiles, the worker fills its caches) then
   --latency-seconds; p50/p99 of (output record's broker append time - the event's `ts`): both
   output topics use LogAppendTime.
Progress goes to stderr, the table to stdout; compare figures within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.kafka.topics import create_topics_sync  # noqa: E402
from app.devstack.launcher import LocalCluster, isolated_env  # noqa: E402
from bench_pipeline import (PARTITIONS, add_load_options, cpu_seconds, encode, make_batches, pct, produce,  # noqa: E402
                            saturate, wait_committed, write_configs)

ANCHOR_DIR = Path(__file__).resolve().parents[1] / "jvm" / "streams-anchor" / "target"
APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}
#: the limits the worker applies to these principals under bench_pipeline's CONFIGS
PRODUCER_LIMIT = 1_000_000
CONSUMER_LIMIT = 4_000_000


class UsageError(Exception):
    """A condition the user can fix: printed as one line, exit 2."""


@dataclass
class Anchor:
    """A running anchor process; `stop()` ends it as SIGTERM would end a worker."""

    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def anchor_command(jar_dir: Path, bootstrap: str, app_id: str, source: str, output: str,
                   state_dir: Path) -> list[str]:
    classpath = f"{jar_dir / 'quota-streams-anchor.jar'}{os.pathsep}{jar_dir / 'libs'}/*"
    return ["java", "-Xms512m", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", classpath, "io.quotastreams.anchor.Main", "--bootstrap", bootstrap,
            "--application-id", app_id, "--input", source, "--output", output,
            "--state-dir", str(state_dir), "--producer-limit", str(PRODUCER_LIMIT),
            "--consumer-limit", str(CONSUMER_LIMIT)]


def start_anchor(jar_dir: Path, bootstrap: str, app_id: str, source: str, output: str,
                 work: Path, timeout: float = 120.0) -> Anchor:
    """Start the anchor and return once it printed that the application is RUNNING."""
    create_topics_sync(bootstrap, [(source, PARTITIONS, None), (output, PARTITIONS, APPEND_TIME)])
    log_path = work / f"{app_id}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(anchor_command(jar_dir, bootstrap, app_id, source, output, work / app_id),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    anchor = Anchor(proc, log_path)
    deadline = time.monotonic() + timeout
    while b"anchor ready" not in log_path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            anchor.stop()
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"the Streams anchor did not start: {' | '.join(tail)}")
        time.sleep(0.1)
    return anchor


def latency_values(rate: int, seconds: int, batch: int, start_ms: int, fmt: str) -> list[bytes]:
    """bench_pipeline's latency load: 20 users far over their producer quota, so their throttle
    grows with every event and directives are frequent; `ts` is when each record is due out."""
    rng = random.Random(3)
    values = []
    for r in range(rate * seconds // batch):
        t = start_ms + int(r * batch / rate * 1000)
        events = [{"type": "request", "v": 1, "ts": t, "user": f"lat{rng.randrange(20)}", "client_id": "c",
                   "api": "Produce", "bytes": 50_000} for _ in range(batch)]
        values.append(encode(events, 1, fmt))
    return values


async def latency(bootstrap: str, source: str, output: str, rate: int, warmup: int, seconds: int,
                  fmt: str) -> list[float]:
    """Output append time - event ts (ms) of the outputs for events after the warm-up, in
    arrival order."""
    batch = 100
    start_ms = int(time.time() * 1000) + 1000
    counted_from = start_ms + warmup * 1000
    values = latency_values(rate, warmup + seconds, batch, start_ms, fmt)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    tps = [TopicPartition(output, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    await consumer.seek_to_end(*tps)
    await asyncio.sleep(max(0.0, start_ms / 1000 - time.time()))
    await produce(bootstrap, source, values, rate=rate, batch=batch)
    lat: list[float] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        got = await consumer.getmany(timeout_ms=1000)
        if not got and lat:
            break  # a second with no output after the load ended: the system has caught up
        for recs in got.values():
            for r in recs:
                d = orjson.loads(r.value)
                if d["ts"] >= counted_from:
                    lat.append(r.timestamp - d["ts"])
    await consumer.stop()
    return lat


def anchor_saturation(jar_dir: Path, bootstrap: str, source: str, work: Path, total: int
                      ) -> tuple[float, float]:
    """The anchor on the backlog: (samples/s, CPU-s of the process), from RUNNING to every
    source and repartition offset committed."""
    app_id = "anchor-sat"
    anchor = start_anchor(jar_dir, bootstrap, app_id, source, f"{app_id}.directives", work)
    try:
        ready = time.perf_counter()
        cpu_ready = cpu_seconds(anchor.proc.pid)
        asyncio.run(wait_committed(bootstrap, app_id, source, 900))
        done = asyncio.run(wait_committed(bootstrap, app_id, f"{app_id}-samples-repartition", 900))
        cpu = cpu_seconds(anchor.proc.pid) - cpu_ready
    finally:
        anchor.stop()
    return total / (done - ready), cpu


def summarize(lat: list[float]) -> dict[str, float]:
    tail = lat[len(lat) * 3 // 4:]  # in arrival order: the run's last quarter
    return {"outputs": len(lat), "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
            "last_quarter_p50_ms": pct(tail, 0.5)}


def table(figures: dict[str, Any]) -> list[str]:
    """The side-by-side table: one row per measure, the unit and window of each."""
    w, a = figures["worker"], figures["anchor"]
    rate = f"{figures['rate']:,}/s"
    rows = [
        ("samples/s at saturation", f"{w['samples_per_s']:,.0f}", f"{a['samples_per_s']:,.0f}",
         "samples / wall s, ready -> all input committed"),
        ("samples per process CPU-second", f"{w['samples_per_cpu_s']:,.0f}", f"{a['samples_per_cpu_s']:,.0f}",
         "user+sys CPU of the one process, same span"),
        (f"event -> output p50 ms @ {rate}", f"{w['p50_ms']:,.0f}", f"{a['p50_ms']:,.0f}",
         f"output append time - event ts, {figures['latency_seconds']} s after warm-up"),
        (f"event -> output p99 ms @ {rate}", f"{w['p99_ms']:,.0f}", f"{a['p99_ms']:,.0f}", "same"),
        ("outputs counted in the latency run", f"{w['outputs']:,}", f"{a['outputs']:,}",
         "directive records"),
    ]
    head = ("measure", "worker", "Streams anchor", "unit, window")
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(4)]
    lines = [f"{head[0]:<{widths[0]}}  {head[1]:>{widths[1]}}  {head[2]:>{widths[2]}}  {head[3]}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}")
    for name, f in (("worker", w), ("Streams anchor", a)):
        if f["last_quarter_p50_ms"] > 2 * f["p50_ms"] + 50:
            lines.append(f"the {name} fell behind {rate} (latency kept growing)")
    return lines


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="qs-anchor-"))
    base = {"QS_PARTITIONS": str(PARTITIONS), "QS_LOG_LEVEL": "info",
            "QS_CONFIG_GRACE_MS": str(args.config_grace_ms)}
    env = {**isolated_env("bench"), **base, "QS_STATE_DIR": str(work / "state")}
    cluster = LocalCluster(1, work_dir=work, env=env)
    lat_env = {**isolated_env("bench-lat"), **base, "QS_STATE_DIR": str(work / "state-lat")}
    lat_stack: LocalCluster | None = None
    figures: dict[str, Any] = {"format": args.format, "batch": args.batch, "records": args.records,
                               "rate": args.rate, "latency_seconds": args.latency_seconds,
                               "warmup_seconds": args.warmup_seconds}
    total = args.records * args.batch
    try:
        print("starting Kafka ...", file=sys.stderr)
        bootstrap = cluster.start_broker()
        asyncio.run(write_configs(bootstrap, env["QS_TOPIC_CONFIGS"]))
        print(f"generating {args.records} {args.format} records x {args.batch} samples ...", file=sys.stderr)
        values = make_batches(args.records, args.batch, args.entities, int(time.time() * 1000),
                              random.Random(1), args.format)
        asyncio.run(produce(bootstrap, env["QS_TOPIC_REQUEST"], values))
        del values

        print("worker at saturation ...", file=sys.stderr)
        w_rate, (w_cpu,) = saturate(cluster, bootstrap, env, total)
        cluster.kill_worker(0, signal.SIGTERM)
        print("Streams anchor at saturation ...", file=sys.stderr)
        a_rate, a_cpu = anchor_saturation(args.anchor_dir, bootstrap, env["QS_TOPIC_REQUEST"], work, total)

        print(f"worker latency: {args.rate:,} samples/s, {args.warmup_seconds} + {args.latency_seconds} s ...",
              file=sys.stderr)
        # a stack of its own on the same broker: its directives topic made first, with append times
        lat_stack = LocalCluster(1, bootstrap=bootstrap, work_dir=work / "lat", env=lat_env)
        create_topics_sync(bootstrap, [(lat_env["QS_TOPIC_DIRECTIVES"], PARTITIONS, APPEND_TIME)])
        lat_stack.start_broker()
        asyncio.run(write_configs(bootstrap, lat_env["QS_TOPIC_CONFIGS"]))
        lat_stack.start()
        lat_stack.wait_ready(timeout=120)
        w_lat = asyncio.run(latency(bootstrap, lat_env["QS_TOPIC_REQUEST"], lat_env["QS_TOPIC_DIRECTIVES"],
                                    args.rate, args.warmup_seconds, args.latency_seconds, args.format))
        lat_stack.kill_worker(0, signal.SIGTERM)

        print(f"Streams anchor latency: {args.rate:,} samples/s, {args.warmup_seconds} + "
              f"{args.latency_seconds} s ...", file=sys.stderr)
        anchor = start_anchor(args.anchor_dir, bootstrap, "anchor-lat", "anchor-lat.request",
                              "anchor-lat.directives", work)
        try:
            a_lat = asyncio.run(latency(bootstrap, "anchor-lat.request", "anchor-lat.directives",
                                        args.rate, args.warmup_seconds, args.latency_seconds, args.format))
        finally:
            anchor.stop()
    finally:
        if lat_stack is not None:
            lat_stack.stop()
        cluster.stop()
    figures["worker"] = {"samples_per_s": w_rate, "cpu_s": w_cpu, "samples_per_cpu_s": total / w_cpu,
                         **summarize(w_lat)}
    figures["anchor"] = {"samples_per_s": a_rate, "cpu_s": a_cpu, "samples_per_cpu_s": total / a_cpu,
                         **summarize(a_lat)}
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_load_options(ap, "source record format, read by both")
    ap.add_argument("--rate", type=int, default=20_000, help="samples/s of the latency runs (default %(default)s)")
    ap.add_argument("--warmup-seconds", type=int, default=3,
                    help="load before the latency runs count (default %(default)s)")
    ap.add_argument("--latency-seconds", type=int, default=10, help="counted length of each latency run (default %(default)s)")
    ap.add_argument("--config-grace-ms", type=int, default=20,
                    help="QS_CONFIG_GRACE_MS of the workers (default %(default)s, the default's)")
    ap.add_argument("--anchor-dir", type=Path, default=ANCHOR_DIR,
                    help="the anchor's build output: its jar and libs/ (default jvm/streams-anchor/target)")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    try:
        if not (args.anchor_dir / "quota-streams-anchor.jar").is_file():
            raise UsageError(f"no Streams anchor in {args.anchor_dir}: build it with `make setup`")
        if min(args.records, args.batch, args.rate, args.latency_seconds) < 1 or args.warmup_seconds < 0:
            raise UsageError("--records, --batch, --rate and --latency-seconds must be positive")
        figures = run(args)
    except UsageError as exc:
        print(f"bench_streams_anchor: {exc}", file=sys.stderr)
        return 2
    print(f"\n{args.format} source records of {args.batch} samples, {args.records * args.batch:,} samples "
          f"at saturation; latency at {args.rate:,} samples/s\n")
    print("\n".join(table(figures)))
    print("\nworker: every quota of the configs (byte rates and request time), configs resolved per "
          "principal;\nStreams anchor: producer and consumer byte rates only, limits fixed "
          f"({PRODUCER_LIMIT:,} / {CONSUMER_LIMIT:,} B/s); both per broker, 11 x 1 s windows, Kafka's Rate")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
