"""Benchmark: audit throughput (events/s) on Spark, end to end against a Kafka broker.

What is timed: `run_audit` on N events already in Kafka, i.e. reading the event topics with the
`quota_kafka` source, step 1 (validate, skew clock, route), the shuffle and sort by route key,
step 2 (the QuotaEngine) and its output, then the directives and the diff against the control
topic. Each run audits both ways (`--modes`): with step 2's summaries only (the default), and
with a row per decision too (`--decisions`). Session start is excluded; usage/recommendations
are timed separately; the HTML report is off. The first run also starts Spark's Python
workers, so it is reported apart.
Next to the wall times it prints the CPU seconds of the Spark JVM and of its Python workers over
the same steps, which the neighbours on a shared box disturb much less.

Setup (not timed): N events from `app.audit.synth.bench_records` (request batches of
--per-record events from --brokers brokers over 2,000 Zipf-skewed principals, ~1% mutations and
connections) produced to a request topic with --partitions partitions (one each for connections,
mutations, configs); the control topic gets the directives the in-process recompute expects,
minus 5 and with 5 changed, so the diff has known answers (checked).

    python bench/bench_audit.py                       # 1M events, local[2]
    python bench/bench_audit.py --standalone 2        # the same on a standalone cluster of
                                                      # two one-core workers (own JVMs)
    python bench/bench_audit.py --events 200000 --profile

With --standalone the CPU columns add up the cluster's processes too: its master and worker
JVMs, the executors they start and the executors' Python workers.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "integration"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000, help="events to audit")
    p.add_argument("--per-record", type=int, default=20, help="events per batch record")
    p.add_argument("--format", choices=("json", "columnar"), default="json",
                   help="how the request batches are written (docs/contract.md)")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the request topic")
    p.add_argument("--brokers", type=int, default=4, help="brokers in the generated events")
    p.add_argument("--runs", type=int, default=2, help="audit runs (the first warms up)")
    p.add_argument("--modes", default="summaries,decisions",
                   help="comma-separated: summaries (the default output), decisions "
                   "(--decisions: also a row per decision); each run audits each mode")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--standalone", type=int, default=0, metavar="WORKERS",
                   help="start a Spark standalone cluster of WORKERS one-core workers on "
                   "loopback (app/devstack/spark.py) and audit on it instead of --master")
    p.add_argument("--route-partitions", type=int, default=None,
                   help="step-2 partitions (default: the audit's default)")
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--jvm-options", default="-XX:+UseParallelGC",
                   help="driver JVM flags; measured: SerialGC added ~12 s to the decisions "
                   "write at 300k and 1M events, ParallelGC nothing")
    p.add_argument("--bootstrap", default="", help="existing cluster (default: a local Kafka)")
    p.add_argument("--profile", action="store_true",
                   help="also profile steps 1 and 2 in-process on up to 200k events (hotspots)")
    p.add_argument("--diagnose", action="store_true",
                   help="after the runs, time cumulative prefixes of the recompute (read, +step "
                   "1, +shuffle and sort, +step 2, +write) to show where the time goes")
    p.add_argument("--out", default="/tmp/bench-audit-out")
    return p.parse_args(argv)


async def produce(bootstrap: str, by_topic: dict[str, list[tuple[int, bytes]]],
                  partitions: dict[str, int]) -> None:
    from aiokafka import AIOKafkaProducer

    from app.kafka.topics import create_topics

    await create_topics(bootstrap, [(t, partitions[t], None) for t in by_topic])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=1 << 20, max_request_size=8 << 20)
    await producer.start()
    try:
        for topic, items in by_topic.items():
            for first in range(0, len(items), 20_000):
                futures = [await producer.send(topic, value, partition=part)
                           for part, value in items[first:first + 20_000]]
                await asyncio.gather(*futures)
    finally:
        await producer.stop()


def encode(record: dict, fmt: str, request: bool) -> bytes:  # type: ignore[type-arg]
    import orjson

    from app.engine.events import parse_event
    from app.intake import columnar

    if fmt == "json" or not request or record.get("type") != "batch":
        return orjson.dumps(record)
    return columnar.encode_events([parse_event(e, record.get("broker"))  # type: ignore[misc]
                                   for e in record["events"]])


def build_input(args: argparse.Namespace, prefix: str):  # type: ignore[no-untyped-def]
    import orjson

    from app.audit import synth
    from app.audit.options import Topics
    from app.audit.explode import ExplodeContext
    from app.audit.in_process import recompute_local
    from app.audit.recompute import MODE_KAFKA, topic_configs
    from app.engine.engine import EngineSettings

    topics = Topics(f"{prefix}.request", f"{prefix}.connection", f"{prefix}.mutation",
                    f"{prefix}.configs", f"{prefix}.directives")
    kind_topic = {"request": topics.request, "connection": topics.connection,
                  "mutation": topics.mutation}
    started = time.perf_counter()
    records = synth.bench_records(args.events, per_record=args.per_record, brokers=args.brokers)
    # configs first: written before the events, they are in force for all of them
    by_topic: dict[str, list[tuple[int, bytes]]] = {t: [] for t in (topics.configs,
                                                                    *kind_topic.values())}
    for n, record in enumerate(records):
        topic = kind_topic[synth.topic_of(record)]
        part = n % args.partitions if topic == topics.request else 0
        by_topic[topic].append((part, encode(record, args.format, topic == topics.request)))
    by_topic[topics.configs] = [(0, orjson.dumps(c)) for c in synth.BENCH_CONFIGS]
    print(f"generated {args.events:,} events in {len(records):,} records "
          f"({time.perf_counter() - started:.1f}s)", flush=True)

    started = time.perf_counter()
    configs, _ = topic_configs([(0, i, None, v, None)
                               for i, (_p, v) in enumerate(by_topic[topics.configs])])
    offsets: dict[tuple[str, int], int] = {}
    local = []
    for topic in kind_topic.values():
        for part, value in by_topic[topic]:
            tp = (topic, part)
            local.append((tp, offsets.get(tp, 0), value, None))
            offsets[tp] = offsets.get(tp, 0) + 1
    local.sort(key=lambda r: (r[0], r[1]))
    streams = {tp: i for i, tp in enumerate(sorted(offsets))}
    expected = recompute_local(local, ExplodeContext(EngineSettings(), MODE_KAFKA, tuple(configs),
                                                     streams)).directives()
    control = list(expected)
    step = max(len(control) // 12, 1)
    for k in range(5):
        del control[step * (k + 1)]
    for k in range(5):
        d = orjson.loads(control[step * (k + 1) + 3])
        d["throttle_time_ms"] += 1
        control[step * (k + 1) + 3] = orjson.dumps(d)
    by_topic[topics.directives] = [(0, v) for v in control]
    print(f"expected {len(expected):,} directives from the in-process recompute "
          f"({time.perf_counter() - started:.1f}s); control topic: 5 dropped, 5 changed",
          flush=True)
    partitions = {t: 1 for t in by_topic}
    partitions[topics.request] = args.partitions
    return topics, by_topic, partitions, len(expected), local, configs, streams


def profile(local, configs, streams, limit: int = 200_000) -> None:  # type: ignore[no-untyped-def]
    """Per-event cost of steps 1 and 2 in-process, and the top functions of each."""
    import gc

    import pyarrow as pa

    from app.audit.explode import ExplodeContext, ExplodedRows, StreamExploder
    from app.audit.recompute import MODE_KAFKA
    from app.audit.run import RunContext, Runner
    from app.engine.engine import EngineSettings
    from app.intake import columnar

    ctx = ExplodeContext(EngineSettings(), MODE_KAFKA, tuple(configs), streams)
    pinned = ("p0", "p1", "p2", "p3")  # chunks as for four route partitions, run by one engine
    sample, n = [], 0
    for rec in local:
        sample.append(rec)
        value = rec[2]
        n += len(columnar.decode(value)[0]) if columnar.is_columnar(value) else value.count(b'"ts"')
        if n >= limit:
            break
    gc.disable()

    def step1() -> pa.Table:
        ex: dict = {}  # type: ignore[type-arg]
        out = ExplodedRows(pinned)
        batches = []
        for st, pos, v, _arrival in sample:
            e = ex.get(st) or ex.setdefault(st, StreamExploder(ctx))
            e.feed(streams[st], pos, v, out, lambda: "")
            if len(out) >= 20_000:
                batches.append(out.to_batch())
        batches.append(out.to_batch())
        return pa.Table.from_batches(batches).sort_by(
            [("t", "ascending"), ("s", "ascending"), ("pos", "ascending"), ("i", "ascending")])

    def step2(table: pa.Table, every_decision: bool = False) -> int:
        run_ctx = RunContext(EngineSettings(), tuple(configs), every_decision=every_decision)
        runner = Runner(run_ctx)
        res = run_ctx.outputs()
        for b in table.to_batches(max_chunksize=10_000):
            runner.run_batch(b, res)
            res.to_batches()
        runner.finish(res)
        res.to_batches(final=True)
        return runner.events

    t = time.perf_counter()
    table = step1()
    t1 = time.perf_counter() - t
    t = time.perf_counter()
    events = step2(table)
    t2 = time.perf_counter() - t
    t = time.perf_counter()
    step2(table, every_decision=True)
    t3 = time.perf_counter() - t
    print(f"\nin-process, one core, {events:,} events: step 1 {t1 / events * 1e6:.1f} µs/event, "
          f"step 2 {t2 / events * 1e6:.1f} µs/event with summaries, "
          f"{t3 / events * 1e6:.1f} with a row per decision too")
    for name, fn in (("step 1 (parse, validate, route)", step1),
                     ("step 2 (engine, summaries)", lambda: step2(table))):
        prof = cProfile.Profile()
        prof.enable()
        fn()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(8)
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("ncalls"))
        print(f"\nhotspots, {name} (cProfile, tottime):")
        print("\n".join(lines[start:start + 9]))
    gc.enable()


def diagnose(spark, opts) -> None:  # type: ignore[no-untyped-def]
    """Time cumulative prefixes of the recompute; differences are each part's cost.

    Step 2 runs in the last run's mode. The last prefix writes step 2's output with Spark's
    writer, as the audit does on a cluster (on local Spark the audit's tasks write the
    decisions themselves)."""
    from pyspark.sql import functions as F

    from app.audit.frames import pinned_keys
    from app.audit.input_plan import plan_kafka
    from app.audit.session import Progress
    from app.audit.explode import ExplodeContext, explode_function
    from app.audit.recompute import EXPLODED_DDL
    from app.audit.run import RunContext, run_function
    from app.audit.results import RESULT_DDL

    plan = plan_kafka(spark, opts, Progress(quiet=True))
    n = 2 * spark.sparkContext.defaultParallelism
    ctx = ExplodeContext(opts.settings, plan.mode, tuple(plan.configs), plan.streams,
                         pinned=pinned_keys(spark, n))
    exploded = plan.records.mapInArrow(explode_function(ctx), EXPLODED_DDL)
    shuffled = exploded.repartition(n, "rk").sortWithinPartitions("t", "s", "pos", "i")
    run_ctx = RunContext(opts.settings, tuple(plan.configs), every_decision=opts.decisions)
    results = shuffled.mapInArrow(run_function(run_ctx), RESULT_DDL)
    stages = [
        ("read (quota_kafka source)", plan.records.agg(F.sum(F.length("value")))),
        ("+ step 1 (explode)", exploded.agg(F.sum(F.length("items")))),
        ("+ shuffle and sort", shuffled.agg(F.sum(F.length("items")))),
        ("+ step 2 (engine)", results.agg(F.count("*"), F.sum("observed"))),
    ]
    print("\ncumulative prefixes of the recompute (each a separate Spark job), wall and CPU "
          "seconds (JVM + Python workers):")
    previous = (0.0, 0.0, 0.0)
    for name, run in [*((name, df.collect) for name, df in stages),
                      ("+ Parquet write", results.write.mode("overwrite").format("parquet")
                       .option("path", f"{opts.out}-diagnose").save)]:
        cpu = spark_cpu()
        started = time.perf_counter()
        run()
        took = time.perf_counter() - started
        jvm, python = (after - before for after, before in zip(spark_cpu(), cpu))
        print(f"  {name:28} {took:6.1f}s (+{took - previous[0]:4.1f})  JVM {jvm:5.1f}s "
              f"(+{jvm - previous[1]:4.1f})  Python {python:5.1f}s (+{python - previous[2]:4.1f})")
        previous = (took, jvm, python)


def spark_cpu(cluster: tuple[int, ...] = ()) -> tuple[float, float]:
    """CPU seconds used so far by this process's descendants and by the `cluster` processes
    (a standalone cluster's master and workers) with theirs: (JVMs, Spark's Python workers).

    On a shared box wall time depends on the neighbours; CPU seconds much less. Linux /proc
    only (zeros elsewhere). Exited workers count once their parent has reaped them. A child in
    a session of its own (the local Kafka's nodes) is not Spark's and is left out, unless it
    is one of `cluster`.
    """
    proc = Path("/proc")
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for entry in proc.glob("[0-9]*"):
        try:
            name, rest = entry.joinpath("stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        stats[int(entry.name)] = (name.split("(", 1)[1], sum(map(int, fields[11:15])) / tick)
        if fields[3] != entry.name:  # a session leader: started apart, not by Spark
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    jvm = python = 0.0
    todo = list(children.get(os.getpid(), [])) + [p for p in cluster if p in stats]
    while todo:
        pid = todo.pop()
        comm, cpu = stats[pid]
        if comm == "java":
            jvm += cpu
        elif comm.startswith("python"):  # not the broker
            python += cpu
        todo.extend(children.get(pid, []))
    return jvm, python


#: (role, what its Java command line names) of the Spark processes `peak_memory` reports
SPARK_ROLES = (("driver (JVM)", "org.apache.spark.deploy.SparkSubmit"),
               ("executor (JVM)", "CoarseGrainedExecutorBackend"),
               ("standalone master and workers (JVM)", "org.apache.spark.deploy."))


def peak_memory() -> dict[str, list[float]]:
    """Memory (MB) by role: the resident memory now of this process (the driver's Python; the
    input it built was freed before the audit, and its peak is the input's), and the peak
    resident memory so far (Linux's VmHWM) of every Spark JVM on the machine."""
    def status(pid: str, field: str) -> float:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 1024
        return 0.0

    def hwm(pid: str) -> float:
        return status(pid, "VmHWM:")

    gc.collect()
    out: dict[str, list[float]] = {"this process now (the driver's Python, which built the input)": [
        status(str(os.getpid()), "VmRSS:")]}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = entry.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()
            role = next((r for r, marker in SPARK_ROLES if marker in cmdline), None)
            if role is not None:
                out.setdefault(role, []).append(hwm(entry.name))
        except OSError:  # gone meanwhile
            continue
    return out


def cpu_progress(cluster: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """A quiet `Progress` that also records (JVM, Python) CPU seconds per step."""
    from app.audit.session import Progress

    class CpuProgress(Progress):
        def __init__(self) -> None:
            super().__init__(quiet=True)
            self.cpu: dict[str, tuple[float, float]] = {}
            self._at: tuple[str, tuple[float, float]] | None = None

        def step(self, name: str) -> None:
            now = spark_cpu(cluster)
            if self._at is not None:
                step, before = self._at
                self.cpu[step] = (now[0] - before[0], now[1] - before[1])
            self._at = (name, now)
            super().step(name)

    return CpuProgress()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Spark's Python workers import `app` from PYTHONPATH, not from this script's sys.path:
    # without this they could run another checkout (e.g. an editable install) than the driver.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    from app.audit.job import run_audit
    from app.audit.options import AuditOptions
    from app.audit.session import build_session
    from app.devstack.kafka import KafkaCluster
    from app.devstack.spark import SparkStandalone, loopback_env
    from app.engine.engine import EngineSettings
    from app.kafka.security import PLAINTEXT
    from app.signing import Signing

    broker = None
    standalone: SparkStandalone | None = None
    bootstrap = args.bootstrap
    if not bootstrap:
        broker = KafkaCluster().start()
        bootstrap = broker.bootstrap()
    try:
        prefix = f"bench{uuid.uuid4().hex[:6]}"
        topics, by_topic, partitions, n_expected, local, configs, streams = build_input(args, prefix)
        started = time.perf_counter()
        asyncio.run(produce(bootstrap, by_topic, partitions))
        records = sum(len(v) for v in by_topic.values())
        print(f"produced {records:,} records in {time.perf_counter() - started:.1f}s", flush=True)
        del by_topic
        if args.profile:
            profile(local, configs, streams)
        del local

        started = time.perf_counter()
        if args.standalone:
            standalone = SparkStandalone(Path(args.out) / "spark", workers=args.standalone,
                                         cores=1, memory="2g").start()
            os.environ.update(loopback_env())
            args.master = standalone.url
        spark = build_session(args.master, args.driver_memory, None, "bench-audit",
                              args.jvm_options)
        print(f"Spark session ({args.master}) in {time.perf_counter() - started:.1f}s "
              "(not counted)\n", flush=True)
        rows = []
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        for run, mode in ((r, m) for r in range(args.runs) for m in modes):
            opts = AuditOptions(out=f"{args.out}/run{run}-{mode}", inputs=["kafka"],
                                security=PLAINTEXT, signing=Signing(),
                                settings=EngineSettings(), topics=topics, bootstrap=bootstrap,
                                partitions=args.route_partitions, report=False,
                                decisions=mode == "decisions")
            progress = cpu_progress(tuple(p.pid for p in standalone.procs) if standalone else ())
            summary = run_audit(spark, opts, progress)
            jvm, python = (sum(c[k] for name, c in progress.cpu.items()
                               if not name.startswith("usage")) for k in (0, 1))
            steps = summary["seconds"]["steps"]
            recompute = sum(v for k, v in steps.items() if k.startswith(("planning", "recomputing")))
            directives = steps.get("directives", 0.0)
            diff = steps.get("diff against the control directives", 0.0)
            analytics = steps.get("usage and recommendations", 0.0)
            core = recompute + directives + diff
            d = summary["diff"]
            ok = (d["missing"], d["different"], d["unexpected"], d["invalid"]) == (5, 5, 0, 0) \
                and summary["counts"]["directives_recomputed"] == n_expected
            rows.append((run, mode, recompute, directives, diff, core, args.events / core,
                         analytics, summary["seconds"]["total"], ok, summary["partitions"], jvm,
                         python))
        print(f"{'run':>3}  {'output':>9}  {'read+recompute':>14}  {'directives':>10}  "
              f"{'diff':>6}  {'subtotal':>8}  {'events/s':>9}  {'CPU: JVM':>8}  {'Python':>6}  "
              f"{'usage+recs':>10}  {'total':>6}  diff ok")
        for run, mode, rec, dirs, diff, core, rate, ana, total, ok, n, jvm, python in rows:
            label = f"{run}{'*' if run == 0 and args.runs > 1 else ''}"
            print(f"{label:>3}  {mode:>9}  {rec:13.1f}s  {dirs:9.1f}s  {diff:5.1f}s  "
                  f"{core:7.1f}s  {rate:9,.0f}  {jvm:7.1f}s  {python:5.1f}s  {ana:9.1f}s  "
                  f"{total:5.1f}s  {'yes' if ok else 'NO'}")
        print(f"\n{args.events:,} events ({records:,} records, {args.partitions} request "
              f"partitions, {rows[0][10]} route partitions) on {args.master}, "
              "read + recompute + diff (target 200,000 events/s):")
        for mode in modes:
            warm = [r for r in rows if r[1] == mode and (r[0] > 0 or args.runs == 1)]
            print(f"  {mode:>9}: {max(r[6] for r in warm):,.0f} events/s")
        print("CPU: seconds of the Spark JVM and of its Python workers during read + recompute "
              "+ diff (the driver's own Python is not counted)")
        if args.runs > 1:
            print("* first run includes Python worker start-up")
        peaks = peak_memory()
        print("memory: " + "; ".join(
            f"{role} {', '.join(f'{mb:,.0f} MB' for mb in values)}"
            for role, values in peaks.items() if values))
        if args.diagnose:
            diagnose(spark, opts)
        spark.stop()
        return 0 if all(r[9] for r in rows) else 1
    finally:
        if standalone is not None:
            standalone.stop()
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    sys.exit(main())
