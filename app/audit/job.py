"""The audit as a Spark job: read, recompute, diff, aggregate, write, report.

    records (quota_kafka source or archive)
      -> step 1 `mapInArrow(explode)`      one task per input stream, in order
      -> `repartition(N, rk)` + `sortWithinPartitions(t, s, pos, i)`
      -> step 2 `mapInArrow(run)`          one QuotaEngine per partition
      -> <out>/deadletter, step 2's summaries (+ <out>/decisions with --decisions)
    step-2 copies of the decisions that published one -> <out>/directives
    summaries -> <out>/usage, <out>/recommendations
    directives + control topic -> `repartition(group)` + sort -> `mapInArrow(diff)` -> <out>/diff
    -> <out>/summary.json, <out>/report/report.html (+ PNGs)

The ordering rules are in `app.audit.recompute`; docs/audit.md is the user guide.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.audit import diff as diffmod
from app.audit import recommend
from app.audit.common import entity_candidates, entity_string, parse_entity
from app.audit.recompute import (
    EXPLODED_DDL,
    MODE_FILE,
    MODE_KAFKA,
    SPLITS_DDL,
    ConfigEntry,
    ExplodeContext,
    RunContext,
    TopicRecord,
    archive_configs,
    explode_function,
    route_map_from_splits,
    run_function,
    splits_possible,
    timestamps_ms,
    topic_configs,
    KEY_SEP,
)
from app.audit.results import (
    DEADLETTER_COLUMNS,
    DECISION_COLUMNS,
    RESULT_DDL,
    SKETCH_FIELDS,
    USAGE_FIELDS,
    ddl,
)
from app.audit.summaries import BASE_BUCKET_MS
from app.engine.engine import EngineSettings
from app.errors import reason
from app.kafka.security import PLAINTEXT, KafkaSecurity
from app.signing import Signing

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession

#: Kafka offsets per Spark task when reading event topics: "never split a partition", because
#: a stream must be read in one task, in order (the skew clock and the config timeline).
WHOLE_PARTITION = str(2**62)


class AuditError(ValueError):
    """A problem with the audit's inputs the user can fix (printed as one line)."""


@dataclass(frozen=True)
class Topics:
    request: str = "quota.events.request"
    connection: str = "quota.events.connection"
    mutation: str = "quota.events.mutation"
    configs: str = "quota.configs"
    directives: str = "quota.directives"

    @property
    def events(self) -> tuple[str, str, str]:
        return (self.request, self.connection, self.mutation)


@dataclass
class AuditOptions:
    out: str
    inputs: list[str] = field(default_factory=lambda: ["kafka"])
    settings: EngineSettings = field(default_factory=EngineSettings)
    topics: Topics = field(default_factory=Topics)
    bootstrap: str = ""
    #: how Kafka is reached (the driver's reads, and the executors': `KafkaSecurity.options`),
    #: and the keys the config and control records must be sealed with: the settings'
    security: KafkaSecurity = PLAINTEXT
    signing: Signing = Signing()
    #: "auto" (the control topic for Kafka input, nothing for archives), "none", "kafka", or
    #: paths of directive archives (JSON lines, e.g. `quota-streams directives` output).
    control: list[str] = field(default_factory=lambda: ["auto"])
    time_from: int | None = None
    time_to: int | None = None
    warmup_ms: int | None = None
    starting_offsets: str | None = None
    ending_offsets: str | None = None
    partitions: int | None = None
    #: usage time bucket; None: automatic (`auto_bucket_ms`)
    bucket_ms: int | None = None
    entities: list[str] = field(default_factory=list)
    tolerance: str = "0"
    headroom: float = recommend.DEFAULT_HEADROOM
    top: int = 15
    report: bool = True
    #: also write one row per decision to <out>/decisions (~2 per event: costs step 2 more
    #: than the engine); usage and recommendations come from step 2's summaries either way
    decisions: bool = False

    @property
    def kafka(self) -> bool:
        return self.inputs == ["kafka"]

    def warmup(self) -> int:
        s = self.settings
        if self.warmup_ms is not None:
            return self.warmup_ms
        return 2 * max(s.window_num * s.window_ms, s.controller_window_num * s.controller_window_ms)


@dataclass
class InputPlan:
    mode: str
    records: Any  # DataFrame: step 1 input
    streams: dict[Any, int]
    stream_names: list[str]
    configs: list[ConfigEntry]
    bad_configs: list[tuple[str, str]]
    control: Any | None  # DataFrame with `value` (+ partition/offset) or None
    description: str
    planned_records: int | None = None
    #: Kafka: the event timestamps before each stream's first offset read (`clock_seeds`)
    seeds: dict[Any, tuple[int, ...]] = field(default_factory=dict)


# -- session and progress --------------------------------------------------------------------


def build_session(master: str = "local[*]", driver_memory: str = "1g",
                  partitions: int | None = None, app_name: str = "quota-streams-audit",
                  jvm_options: str = "-XX:+UseParallelGC") -> SparkSession:
    """A SparkSession for the audit: UI off, driver on loopback for local masters, UTC.

    ParallelGC: with SerialGC the decisions write stalled for ~12 s per run on 2 cores.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", jvm_options)
        .config("spark.executor.extraJavaOptions", jvm_options)
    )
    if master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    if partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Progress:
    """Step lines on stderr, and while a Spark job runs, its task counts (on a terminal)."""

    def __init__(self, quiet: bool = False, stream: Any = None) -> None:
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.timings: dict[str, float] = {}
        self._step: str | None = None
        self._step_started = 0.0

    def step(self, name: str) -> None:
        now = time.monotonic()
        if self._step is not None:
            self.timings[self._step] = round(now - self._step_started, 3)
        self._step, self._step_started = name, now
        if not self.quiet:
            self._clear()
            print(f"[{now - self.started:6.1f}s] {name}", file=self.stream, flush=True)

    def done(self) -> None:
        self.step("done")
        self.timings.pop("done", None)

    def _clear(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K")

    def watch(self, spark: SparkSession) -> None:
        """Poll Spark's status tracker and show running stages' task progress."""
        if self.quiet or not self.tty:
            return
        tracker = spark.sparkContext.statusTracker()

        def loop() -> None:
            while not self._stop.wait(0.5):
                try:
                    parts = []
                    for sid in tracker.getActiveStageIds():
                        info = tracker.getStageInfo(sid)
                        if info:
                            parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                                         f" ({info.numActiveTasks} running)")
                    if parts:
                        self.stream.write("\r\x1b[2K  " + "; ".join(parts))
                        self.stream.flush()
                except Exception:  # noqa: BLE001 - progress must never break the audit
                    pass

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if not self.quiet:
            self._clear()


# -- Kafka helpers (driver side) -------------------------------------------------------------


def existing_topics(bootstrap: str, security: KafkaSecurity, timeout_s: float = 15.0) -> set[str]:
    """Topic names on the cluster, without naming one (a cluster may auto-create it)."""
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def run() -> set[str]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False,
                                    request_timeout_ms=int(timeout_s * 1000),
                                    **security.aiokafka())
        try:  # stopped even when the start fails, or aiokafka warns of an unclosed consumer
            await consumer.start()
            return set(await consumer.topics())
        finally:
            await consumer.stop()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(run(), timeout_s + 5))
    except Exception as exc:  # noqa: BLE001 - any connection failure is one line for the user
        raise AuditError(f"cannot reach Kafka at {bootstrap}: {reason(exc)}") from None
    finally:
        loop.close()


def read_topic_local(bootstrap: str, topic: str, security: KafkaSecurity) -> list[TopicRecord]:
    """`(partition, offset, key, value, timestamp ms)` of a whole topic, read on the driver
    (small topics: configs, a control topic for `explain`), with the data source's exact
    planning."""
    from app.kafka.spark_source import (
        KafkaSourceOptions,
        plan_partitions,
        probe_partitions,
        read_offset_range,
        resolve_ranges,
    )

    opts = KafkaSourceOptions.from_options({"bootstrap": bootstrap, "topics": topic,
                                            "max_records_per_partition": WHOLE_PARTITION,
                                            **security.options()})
    earliest, latest = probe_partitions(opts)
    out: list[TopicRecord] = []
    for part in plan_partitions(resolve_ranges(earliest, latest), 2**62):
        for batch in read_offset_range(opts, part):
            out.extend(zip(batch.column("partition").to_pylist(),
                           batch.column("offset").to_pylist(), batch.column("key").to_pylist(),
                           batch.column("value").to_pylist(),
                           timestamps_ms(batch.column("timestamp"))))
    return out


def pinned_keys(spark: SparkSession, n: int) -> tuple[str, ...]:
    """One route key per step-2 partition, found with Spark's own hash partitioning
    (`pmod(hash(rk), n)` is what `repartition(n, "rk")` computes)."""
    from pyspark.sql import functions as F

    found: dict[int, str] = {}
    batch = 0
    while len(found) < n:
        candidates = [(f"\x00partition-{batch}-{j}",) for j in range(max(64, 8 * n))]
        rows = (spark.createDataFrame(candidates, "rk string")
                .select("rk", F.expr(f"pmod(hash(rk), {n})").alias("p")).collect())
        for r in rows:
            found.setdefault(r["p"], r["rk"])
        batch += 1
        if batch > 50:  # pragma: no cover - would need a broken hash
            raise RuntimeError("could not pin a route key to every partition")
    return tuple(found[p] for p in range(n))


# -- input planning --------------------------------------------------------------------------


def plan_kafka(spark: SparkSession, opts: AuditOptions, progress: Progress) -> InputPlan:
    from app.kafka.spark_source import KafkaSourceOptions, probe_partitions, resolve_ranges

    if not opts.bootstrap:
        raise AuditError("--input kafka needs --bootstrap or KAFKA_BOOTSTRAP_SERVERS")
    topics = existing_topics(opts.bootstrap, opts.security)
    events = [t for t in opts.topics.events if t in topics]
    missing = [t for t in opts.topics.events if t not in topics]
    if not events:
        raise AuditError(f"none of the event topics exist on {opts.bootstrap}: "
                         f"{', '.join(opts.topics.events)}")
    for t in missing:
        progress.step(f"note: event topic {t} does not exist; skipped")
    source = {"bootstrap": opts.bootstrap, "topics": ",".join(events),
              "max_records_per_partition": WHOLE_PARTITION, **opts.security.options()}
    if opts.starting_offsets:
        source["starting_offsets"] = opts.starting_offsets
    if opts.ending_offsets:
        source["ending_offsets"] = opts.ending_offsets
    try:
        parsed = KafkaSourceOptions.from_options(source)
        earliest, latest = probe_partitions(parsed)
        ranges = resolve_ranges(earliest, latest, parsed.starting, parsed.ending,
                                fail_on_data_loss=parsed.fail_on_data_loss)
    except ValueError as exc:
        raise AuditError(str(exc)) from None
    tps = sorted(latest)
    streams = {tp: index for index, tp in enumerate(tps)}
    planned = sum(end - start for start, end in ranges.values())
    seeds = clock_seeds(opts.bootstrap, {tp: start for tp, (start, end) in ranges.items()
                                         if earliest.get(tp, 0) < start < end}, progress,
                        opts.security)
    records = (spark.read.format("quota_kafka").options(**source).load()
               .select("topic", "partition", "offset", "value", "timestamp"))
    configs: list[ConfigEntry] = []
    bad: list[tuple[str, str]] = []
    if opts.topics.configs in topics:
        configs, bad = topic_configs(
            read_topic_local(opts.bootstrap, opts.topics.configs, opts.security),
            opts.topics.configs, opts.signing)
    else:
        progress.step(f"note: config topic {opts.topics.configs} does not exist: no quotas")
    control = None
    want = opts.control
    if want in (["auto"], ["kafka"]):
        if opts.topics.directives in topics:
            control = (spark.read.format("quota_kafka")
                       .option("bootstrap", opts.bootstrap)
                       .option("topics", opts.topics.directives)
                       .options(**opts.security.options()).load()
                       .select("partition", "offset", "key", "value"))
        elif want == ["kafka"]:
            raise AuditError(f"control topic {opts.topics.directives} does not exist")
    elif want != ["none"]:
        control = read_control_files(spark, want)
    return InputPlan(MODE_KAFKA, records, streams, [f"{t}/{p}" for t, p in tps], configs, bad,
                     control, f"kafka {opts.bootstrap} {','.join(events)}", planned, seeds)


def clock_seeds(bootstrap: str, starts: dict[tuple[str, int], int], progress: Progress,
                security: KafkaSecurity) -> dict[Any, tuple[int, ...]]:
    """The event timestamps before each of `starts` (the first offset read of a stream read
    from past its log start), read back as a worker that takes a partition over reads them
    (`app.kafka.clock_seed`): each stream's clock then judges as the workers' did there."""
    import asyncio

    from app.kafka.clock_seed import ClockSeeder

    async def run() -> dict[Any, tuple[int, ...]]:
        seeder = ClockSeeder(bootstrap, security=security)
        found: dict[Any, tuple[int, ...]] = {}
        try:
            for (topic, partition), start in sorted(starts.items()):
                stamps = await seeder.timestamps(topic, partition, start)
                if stamps is None:
                    progress.step(f"note: could not read the records before {topic}/"
                                  f"{partition}@{start}; its stream clock starts empty")
                elif stamps:
                    found[(topic, partition)] = tuple(stamps)
        finally:
            await seeder.stop()
        return found

    if not starts:
        return {}
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def read_control_files(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Directive archives (JSON lines) as `value` rows with a stable order (and no `key`: the
    comparator derives it, `app.audit.diff.parse_directive`)."""
    from pyspark.sql import functions as F

    lines = spark.read.text(paths).where(F.trim(F.col("value")) != "")
    return lines.select(F.lit(0).cast("long").alias("partition"),
                        F.monotonically_increasing_id().alias("offset"),
                        F.col("value").cast("binary").alias("value"))


def plan_archive(spark: SparkSession, opts: AuditOptions, progress: Progress) -> InputPlan:
    from pyspark.sql import functions as F

    from app.audit.archive import infer_format, read_archive

    paths = opts.inputs
    try:
        fmt = infer_format(paths)
    except ValueError as exc:
        raise AuditError(str(exc)) from None
    for path in paths:
        if "://" not in path and not any(ch in path for ch in "*?[") and not Path(path).exists():
            raise AuditError(f"input {path} does not exist")
    kafka_shaped = False
    if fmt == "parquet":
        columns = set(spark.read.parquet(*paths).columns)
        kafka_shaped = {"topic", "partition", "offset", "value"} <= columns
    control = None
    if opts.control not in (["auto"], ["none"]):
        if opts.control == ["kafka"]:
            if not opts.bootstrap:
                raise AuditError("--control kafka needs --bootstrap or KAFKA_BOOTSTRAP_SERVERS")
            control = (spark.read.format("quota_kafka").option("bootstrap", opts.bootstrap)
                       .option("topics", opts.topics.directives)
                       .options(**opts.security.options()).load()
                       .select("partition", "offset", "key", "value"))
        else:
            control = read_control_files(spark, opts.control)
    df = read_archive(spark, paths, format=fmt)
    if kafka_shaped:
        # A dump of Kafka topics keeps Kafka's semantics: streams per (topic, partition),
        # configs from the config topic's rows, arrivals from the timestamps (a dump without
        # them has each record's `ts` there, and then the rule is "configs with ts <= t"), and
        # the keys their seals cover (a dump without them cannot vouch for a sealed config).
        cfg_rows = (df.where(F.col("topic") == opts.topics.configs)
                    .select("partition", "offset", "key", "value",
                            F.expr("unix_millis(timestamp)").alias("ms")).collect())
        configs, bad = topic_configs(
            [(r["partition"], r["offset"], r["key"], r["value"], r["ms"]) for r in cfg_rows],
            opts.topics.configs, opts.signing)
        events = df.where(F.col("topic").isin(*opts.topics.events))
        tps = sorted((r["topic"], r["partition"]) for r in
                     events.select("topic", "partition").distinct().collect())
        streams = {tp: index for index, tp in enumerate(tps)}
        records = (events.select("topic", "partition", "offset", "value", "timestamp")
                   .repartition(max(1, len(tps)), "topic", "partition")
                   .sortWithinPartitions("topic", "partition", "offset"))
        return InputPlan(MODE_KAFKA, records, streams, [f"{t}/{p}" for t, p in tps], configs,
                         bad, control, f"kafka-shaped archive {' '.join(paths)}")
    # JSON lines / event Parquet: one stream, like `replay` of the concatenated files. One
    # pass lists the files and the lines that may hold configs (in order, for the split check).
    df = df.withColumn("file", F.input_file_name())
    maybe_config = F.col("value").cast("string").contains("quota_config")
    per_file = df.groupBy("file").agg(
        F.collect_list(F.when(maybe_config, F.struct("offset", "value"))).alias("configs")
    ).collect()
    files = sorted(r["file"] for r in per_file)
    streams = {name: index for index, name in enumerate(files)}
    cfg_values = [c["value"] for r in sorted(per_file, key=lambda r: r["file"])
                  for c in sorted(r["configs"], key=lambda c: c["offset"])]
    records = (df.select("file", "offset", "value").coalesce(1)
               .sortWithinPartitions("file", "offset"))
    configs, bad = archive_configs(cfg_values)
    return InputPlan(MODE_FILE, records, streams, files, configs, bad,
                     control, f"archive {' '.join(paths)} ({fmt})")


# -- the job ---------------------------------------------------------------------------------


#: Parquet writer options for the step 2 output. `observed` has nearly one value per decision,
#: so its dictionary is built and then thrown away for plain encoding: measured on 2M decisions,
#: turning it off cut the write's JVM CPU by ~15% with the same file size.
PARQUET_WRITE_OPTIONS = {"parquet.enable.dictionary#observed": "false"}
#: Write every kind of step-2 row without first sorting them by kind (Spark's planned write
#: would sort every decision row by the partition column; concurrent writers need no sort).
UNSORTED_PARTITIONED_WRITE = {"spark.sql.optimizer.plannedWrite.enabled": "false",
                              "spark.sql.maxConcurrentOutputFileWriters": "4"}


@contextlib.contextmanager
def _conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """Set SQL confs for one block, restoring the previous values."""
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _hadoop_exists(spark: SparkSession, src: str) -> bool:
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    path = jvm.org.apache.hadoop.fs.Path(src)
    return bool(path.getFileSystem(conf).exists(path))


def _hadoop_delete(spark: SparkSession, src: str) -> None:
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    path = jvm.org.apache.hadoop.fs.Path(src)
    path.getFileSystem(conf).delete(path, True)


def _kind(spark: SparkSession, work: str, kind: str, columns: tuple[str, ...]) -> DataFrame:
    """Step 2's rows of one kind (`app.audit.results`) with these columns (empty if none)."""
    path = f"{work}/kind={kind}"
    if _hadoop_exists(spark, path):
        return spark.read.parquet(path).select(*columns)
    return spark.createDataFrame([], ddl(columns))


def recompute(spark: SparkSession, plan: InputPlan, opts: AuditOptions, n: int,
              progress: Progress, info: dict[str, Any] | None = None,
              decisions_dir: str | None = None) -> DataFrame:
    """Steps 1 and 2 as one DataFrame (lazy) in `RESULT_DDL` shape; `info` gets routing facts.

    With `decisions_dir` (see `task_writable_dir`) step 2 writes the decisions there itself
    and the DataFrame holds only directive copies and dead letters.
    """
    info = {} if info is None else info
    info.update(split_check=False, split_key_sets=0, merged_groups=0)
    route_map = None
    lo = opts.time_from - opts.warmup() if opts.time_from is not None else None
    base = ExplodeContext(
        settings=opts.settings, mode=plan.mode, configs=tuple(plan.configs),
        streams=plan.streams, event_from=lo, event_to=opts.time_to, seeds=plan.seeds,
    )
    if splits_possible(plan.configs, opts.settings.config_grace_ms):
        progress.step("configs may split requests across route keys: discovering splits")
        discover = ExplodeContext(**{**_fields(base), "discover": True})
        keys = (plan.records.mapInArrow(explode_function(discover), SPLITS_DDL)
                .distinct().collect())
        route_map = route_map_from_splits(r["keys"].split(KEY_SEP) for r in keys)
        info.update(split_check=True, split_key_sets=len(keys),
                    merged_groups=len(set(route_map.values())))
        progress.step(f"{len(keys)} split key sets, {len(set(route_map.values()))} merged groups")
    ctx = ExplodeContext(**{**_fields(base), "route_map": route_map,
                            "pinned": pinned_keys(spark, n)})
    run_ctx = RunContext(opts.settings, tuple(plan.configs), opts.time_from, opts.time_to,
                         decisions_dir, every_decision=opts.decisions,
                         bucket_ms=opts.bucket_ms or BASE_BUCKET_MS)
    exploded = plan.records.mapInArrow(explode_function(ctx), EXPLODED_DDL)
    return (exploded.repartition(n, "rk").sortWithinPartitions("t", "s", "pos", "i")
            .mapInArrow(run_function(run_ctx), RESULT_DDL))


def task_writable_dir(spark: SparkSession, out: str) -> Path | None:
    """`out` as a local directory when Spark's tasks run on this machine (a `local` master)
    and can write there themselves; None on a cluster or for a remote `out` (s3a://, hdfs://),
    where Spark's writer is the one that reaches it."""
    if not spark.sparkContext.master.startswith("local"):
        return None
    if "://" in out and not out.startswith("file:"):
        return None
    return _local_dir(out).resolve()


def _fields(ctx: ExplodeContext) -> dict[str, Any]:
    return {f: getattr(ctx, f) for f in ctx.__dataclass_fields__}


def directives_frame(decisions: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return (decisions.where(F.col("directive").isNotNull())
            .select("s", "pos", "i", "di", "ts",
                    F.when(F.col("broker").isNull(), "cluster").otherwise("broker").alias("scope"),
                    "broker", "entity", "quota", "action", "throttle_time_ms",
                    (F.col("ts") + F.col("throttle_time_ms")).alias("until"), "observed",
                    "limit", "window_ms", "config_level", "directive"))


def diff_frame(directives: DataFrame, control: DataFrame, n: int,
               bounds: tuple[int | None, int | None], control_topic: str,
               signing: Signing) -> DataFrame:
    """Expected (recomputed) vs actual (control) directives -> `DIFF_DDL` rows; the actual ones
    as read from `control_topic` (sealed ones verified with `signing`, `app.signing`)."""
    from pyspark.sql import functions as F

    expected = directives.select(
        F.lit("e").alias("side"), "scope", "broker", "entity", "quota", "ts",
        F.col("s").cast("long").alias("k1"), F.col("pos").alias("k2"),
        (F.col("i").cast("long") * 1000 + F.col("di")).alias("k3"),
        F.col("directive").alias("json"), F.lit(None).cast("string").alias("error"))
    actual = control.mapInArrow(diffmod.side_rows_function("a", control_topic, signing),
                                diffmod.SIDE_DDL)
    lo, hi = bounds
    if lo is not None:
        actual = actual.where(F.col("ts").isNull() | (F.col("ts") >= lo))
    if hi is not None:
        actual = actual.where(F.col("ts").isNull() | (F.col("ts") < hi))
    both = expected.unionByName(actual)
    return (both.repartition(n, "entity", "quota")
            .sortWithinPartitions("scope", "broker", "entity", "quota", "ts", "side", "k1", "k2", "k3")
            .mapInArrow(diffmod.diff_function(), diffmod.DIFF_DDL))


def auto_bucket_ms(first: int | None, last: int | None, window_ms: int, buckets: int = 240) -> int:
    """A round bucket size giving at most `buckets` buckets over [first, last], never less
    than one quota window (1 s, 2 s, 5 s, 10 s, 15 s, 30 s, 1 min, ... 1 day)."""
    span = 0 if first is None or last is None else last - first
    for step in (1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
                 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000):
        if step >= window_ms and span / step <= buckets:
            return step
    return 86_400_000


def usage_frame(cells: DataFrame, bucket_ms: int) -> DataFrame:
    """Step 2's usage cells (`summaries.Cell`; several rows of one window and bucket add up)
    -> per (entity, quota, broker, time bucket of `bucket_ms`): usage and throttle totals."""
    from pyspark.sql import functions as F

    bucket = (F.floor(F.col("bucket") / bucket_ms) * bucket_ms).cast("long")
    return (cells.withColumn("bucket", bucket)
            .groupBy("entity", "quota", "broker", "bucket")
            .agg(F.sum("decisions").alias("decisions"), F.sum("amount").alias("amount"),
                 F.max("max_observed").alias("max_observed"),
                 (F.sum("sum_observed") / F.sum("decisions")).alias("avg_observed"),
                 F.max("limit").alias("limit"), F.sum("throttled").alias("throttled"),
                 F.sum("throttle_ms").alias("throttle_ms"),
                 F.sum("directives").alias("directives"),
                 F.min("first_ts").alias("first_ts"), F.max("last_ts").alias("last_ts")))


@dataclass
class Recomputed:
    """Phase 1: the input's directives and dead letters (and decisions) recomputed, on disk,
    and step 2's summaries in `work` (removed when the audit ends)."""

    plan: InputPlan
    partitions: int
    #: facts about routing (split requests and merged route keys)
    routing: dict[str, Any]
    seconds: float
    work: str


@dataclass
class Compared:
    """Phase 2: recomputed directives against the control topic's (None: no control input)."""

    counts: dict[str, int] | None
    by_quota: list[dict[str, Any]]
    #: the first mismatches in time order, for the report
    samples: list[dict[str, Any]]
    seconds: float


@dataclass
class Sized:
    """Phase 3: usage over time, totals, and recommended quotas."""

    bucket_ms: int
    first_ts: int | None
    last_ts: int | None
    decisions: int
    throttled: int
    directives: int
    deadletters: int
    recommendations: list[dict[str, Any]]
    top: list[dict[str, Any]]
    #: usage rows per entity shown in the report
    series: dict[str, list[dict[str, Any]]]


def run_audit(spark: SparkSession, opts: AuditOptions, progress: Progress | None = None
              ) -> dict[str, Any]:
    """Run the whole audit; return the summary (also written to <out>/summary.json)."""
    from app.kafka.spark_source import KafkaDataSource

    progress = progress or Progress(quiet=True)
    try:
        tolerance = diffmod.parse_tolerance(opts.tolerance)
    except ValueError as exc:
        raise AuditError(str(exc)) from None
    entities = []
    for raw in opts.entities:
        try:
            entities.append(parse_entity(raw))
        except ValueError as exc:
            raise AuditError(f"--entity {exc}") from None
    spark.dataSource.register(KafkaDataSource)
    started = time.monotonic()
    progress.watch(spark)
    try:
        recomputed = recompute_phase(spark, opts, progress)
        try:
            compared = compare_phase(spark, opts, recomputed, progress)
            sized = size_phase(spark, opts, recomputed, entities, progress)
        finally:
            _hadoop_delete(spark, recomputed.work)
        summary = summarize(opts, recomputed, compared, sized, tolerance)
        if opts.report:
            from app.audit.report import write_report

            progress.step("report")
            report = write_report(_local_dir(opts.out) / "report", summary, sized.top,
                                  sized.series, compared.by_quota, sized.recommendations,
                                  compared.samples)
            summary["outputs"]["report"] = str(report)
        progress.done()
        summary["seconds"]["total"] = round(time.monotonic() - started, 3)
        summary["seconds"]["steps"] = progress.timings
        out = _local_dir(opts.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        return summary
    finally:
        progress.close()


def recompute_phase(spark: SparkSession, opts: AuditOptions, progress: Progress) -> Recomputed:
    """Plan the input, run steps 1 and 2, and write <out>/deadletter, /directives (and
    /decisions); step 2's summaries stay in the work directory for the other phases."""
    started = time.monotonic()
    out = _out(opts)
    n = opts.partitions or 2 * max(1, spark.sparkContext.defaultParallelism)
    progress.step("planning input")
    plan = plan_kafka(spark, opts, progress) if opts.kafka else plan_archive(spark, opts, progress)
    progress.step(f"recomputing {plan.description} ({len(plan.streams)} streams, "
                  f"{len(plan.configs)} configs) into {n} partitions")
    routing: dict[str, Any] = {}
    local = task_writable_dir(spark, out)
    decisions_dir = None if local is None or not opts.decisions else local / "decisions"
    if decisions_dir is not None:
        shutil.rmtree(decisions_dir, ignore_errors=True)
        decisions_dir.mkdir(parents=True)
    elif not opts.decisions and _hadoop_exists(spark, f"{out}/decisions"):
        _hadoop_delete(spark, f"{out}/decisions")  # an earlier run's: not this input's
    results = recompute(spark, plan, opts, n, progress, routing,
                        None if decisions_dir is None else str(decisions_dir))
    work = f"{out}/_recompute"
    with _conf(spark, UNSORTED_PARTITIONED_WRITE):
        (results.write.mode("overwrite").partitionBy("kind")
         .options(**PARQUET_WRITE_OPTIONS).parquet(work))
    _kind(spark, work, "deadletter", DEADLETTER_COLUMNS).write.mode("overwrite").parquet(
        f"{out}/deadletter")
    if decisions_dir is not None:
        for temp in decisions_dir.glob(".part-*"):  # left by failed task attempts
            temp.unlink()
        if not any(decisions_dir.glob("part-*.parquet")):
            _kind(spark, work, "decision", DECISION_COLUMNS).write.mode("overwrite").parquet(
                f"{out}/decisions")
    elif opts.decisions:
        _kind(spark, work, "decision", DECISION_COLUMNS).write.mode("overwrite").parquet(
            f"{out}/decisions")
    seconds = time.monotonic() - started
    progress.step("directives")
    directives_frame(_kind(spark, work, "directive", DECISION_COLUMNS)).write.mode(
        "overwrite").parquet(f"{out}/directives")
    return Recomputed(plan, n, routing, seconds, work)


def compare_phase(spark: SparkSession, opts: AuditOptions, rec: Recomputed,
                  progress: Progress) -> Compared:
    """Diff the recomputed directives against the control ones into <out>/diff."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    if rec.plan.control is None:
        return Compared(None, [], [], 0.0)
    out = _out(opts)
    progress.step("diff against the control directives")
    bounds = (opts.time_from, opts.time_to)
    if (opts.starting_offsets or opts.ending_offsets) and opts.time_from is None:
        span = (_kind(spark, rec.work, "usage", USAGE_FIELDS)
                .agg(F.min("first_ts"), F.max("last_ts")).collect()[0])
        bounds = (span[0], None if span[1] is None else span[1] + 1)
    diff_frame(spark.read.parquet(f"{out}/directives"), rec.plan.control, rec.partitions, bounds,
               opts.topics.directives, opts.signing).write.mode("overwrite").parquet(f"{out}/diff")
    diff = spark.read.parquet(f"{out}/diff")
    counts = {s: 0 for s in diffmod.STATUSES}
    by_quota = []
    for r in diff.groupBy("status", "quota").count().collect():
        counts[r["status"]] += r["count"]
        by_quota.append({"status": r["status"], "quota": r["quota"], "n": r["count"]})
    samples = [r.asDict() for r in diff.where(F.col("status") != "matched")
               .orderBy("ts").limit(20).collect()]
    for sample in samples:
        sample["fields"] = ", ".join(sample["fields"] or [])
    return Compared(counts, by_quota, samples, time.monotonic() - started)


def size_phase(spark: SparkSession, opts: AuditOptions, rec: Recomputed,
               entities: list[dict[str, str]], progress: Progress) -> Sized:
    """Usage per time bucket into <out>/usage, recommended quotas into <out>/recommendations,
    both from step 2's summaries."""
    from pyspark.sql import functions as F

    out = _out(opts)
    progress.step("usage and recommendations")
    cells = _kind(spark, rec.work, "usage", USAGE_FIELDS)
    span = cells.agg(F.min("first_ts"), F.max("last_ts")).collect()[0]
    bucket_ms = opts.bucket_ms or auto_bucket_ms(span[0], span[1], opts.settings.window_ms)
    usage_frame(cells, bucket_ms).write.mode("overwrite").parquet(f"{out}/usage")
    usage = spark.read.parquet(f"{out}/usage")
    stats = usage.agg(
        F.sum("decisions").alias("decisions"), F.sum("throttled").alias("throttled"),
        F.sum("directives").alias("directives"), F.min("first_ts").alias("first_ts"),
        F.max("last_ts").alias("last_ts"),
    ).collect()[0]
    deadletters = spark.read.parquet(f"{out}/deadletter").count()
    recs = recommend.finish(
        recommend.aggregate(_kind(spark, rec.work, "sketch", SKETCH_FIELDS), rec.partitions),
        opts.headroom)
    _write_small(recs, f"{out}/recommendations", spark)
    top = [r.asDict() for r in usage.groupBy("entity", "quota").agg(
        F.sum("throttled").alias("throttled"), F.sum("throttle_ms").alias("throttle_ms"),
        F.sum("directives").alias("directives"), F.max("max_observed").alias("max_observed"),
        F.max("limit").alias("limit"),
    ).where(F.col("throttled") > 0).orderBy(F.desc("throttle_ms")).limit(opts.top).collect()]
    series: dict[str, list[dict[str, Any]]] = {}
    if entities:
        for spec in entities:
            names = entity_candidates(spec)
            rows = usage.where(F.col("entity").isin(*names)).collect()
            series[entity_string(spec)] = [_series_row(r, len(names) > 1) for r in rows]
    else:
        for r in top[:3]:
            if r["entity"] not in series:
                rows = usage.where(F.col("entity") == r["entity"]).collect()
                series[r["entity"]] = [_series_row(x, False) for x in rows]
    return Sized(bucket_ms, stats["first_ts"], stats["last_ts"], stats["decisions"] or 0,
                 stats["throttled"] or 0, stats["directives"] or 0, deadletters, recs, top,
                 series)


def summarize(opts: AuditOptions, rec: Recomputed, cmp: Compared, sized: Sized,
              tolerance: Any) -> dict[str, Any]:
    """The summary (<out>/summary.json) of the three phases."""
    out = _out(opts)
    plan = rec.plan
    summary: dict[str, Any] = {
        "v": 1,
        "input": plan.description,
        "mode": plan.mode,
        "streams": plan.stream_names[:1000],
        "settings": asdict(opts.settings),
        "time_from": opts.time_from, "time_to": opts.time_to,
        "warmup_ms": opts.warmup() if opts.time_from is not None else None,
        "starting_offsets": opts.starting_offsets, "ending_offsets": opts.ending_offsets,
        "partitions": rec.partitions,
        "usage_bucket_ms": sized.bucket_ms,
        "routing": rec.routing,
        "first_ts": sized.first_ts, "last_ts": sized.last_ts,
        "counts": {
            "planned_records": plan.planned_records,
            "configs": len(plan.configs),
            "bad_configs": len(plan.bad_configs),
            "decisions": sized.decisions,
            "throttled_decisions": sized.throttled,
            "directives_recomputed": sized.directives,
            "deadletters": sized.deadletters,
        },
        "bad_configs": [{"where": w, "reason": r} for w, r in plan.bad_configs[:50]],
        "headroom": opts.headroom,
        "tolerance": opts.tolerance,
        "seconds": {"recompute": round(rec.seconds, 3), "diff": round(cmp.seconds, 3)},
        "outputs": {name: f"{out}/{name}" for name in
                    ("deadletter", "directives", "usage", "recommendations")
                    + (("decisions",) if opts.decisions else ())},
        "recommendations_top": sized.recommendations[:10],
    }
    if cmp.counts is not None:
        summary["diff"] = {**cmp.counts, "mismatches": diffmod.mismatches(cmp.counts)}
        summary["passed"] = diffmod.within_tolerance(cmp.counts, tolerance)
        summary["outputs"]["diff"] = f"{out}/diff"
    else:
        summary["passed"] = True
    return summary


def _series_row(r: Any, label_entity: bool) -> dict[str, Any]:
    d = r.asDict()
    if label_entity:
        d["quota"] = f"{d['quota']} [{d['entity']}]"
    return d


def _out(opts: AuditOptions) -> str:
    return opts.out.rstrip("/")


def _local_dir(out: str) -> Path:
    """The local directory for the summary and report (the datasets may be remote)."""
    if out.startswith("file:"):
        return Path(out[len("file:"):])
    if "://" in out:
        return Path("audit-report")
    return Path(out)


def _write_small(rows: list[dict[str, Any]], path: str, spark: SparkSession) -> None:
    """A small driver-side table as a Parquet dataset."""
    ddl = ("entity string, quota string, decisions long, p50 double, p95 double, p99 double, "
           "max double, `limit` double, config_level string, throttled long, suggested double, "
           "vs_limit double, unit string")
    names = [p.split(" ")[0].strip("`") for p in ddl.split(", ")]
    data = [tuple(r.get(k) for k in names) for r in rows]
    spark.createDataFrame(data, ddl).coalesce(1).write.mode("overwrite").parquet(path)


__all__ = ["AuditError", "AuditOptions", "Compared", "Progress", "Recomputed", "Sized", "Topics",
           "build_session", "compare_phase", "diff_frame", "recompute", "recompute_phase",
           "run_audit", "size_phase", "summarize", "usage_frame"]
