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

`run_audit` runs it in three phases with typed results (`recompute_phase`, `compare_phase`,
`size_phase`) over the input `app.audit.input_plan` plans and the DataFrames `app.audit.frames`
builds; the ordering rules are in `app.audit.recompute`; docs/audit.md is the user guide.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.audit import diff as diffmod
from app.audit import recommend
from app.audit.common import entity_candidates
from app.contract.entities import entity_string, parse_entity_string
from app.audit.frames import diff_frame, directives_frame, recompute, usage_frame
from app.audit.input_plan import InputPlan, plan_archive, plan_kafka
from app.audit.options import AuditError, AuditOptions
from app.audit.results import (
    DEADLETTER_COLUMNS,
    DECISION_COLUMNS,
    SKETCH_FIELDS,
    USAGE_FIELDS,
    ddl,
)
from app.audit.session import Progress

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


#: Parquet writer options for the step 2 output. `observed` has nearly one value per decision,
#: so its dictionary is built and then thrown away for plain encoding: turning it off saves the
#: write that JVM work, with the same file size.
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


def task_writable_dir(spark: SparkSession, out: str) -> Path | None:
    """`out` as a local directory when Spark's tasks run on this machine (a `local` master)
    and can write there themselves; None on a cluster or for a remote `out` (s3a://, hdfs://),
    where Spark's writer is the one that reaches it."""
    if not spark.sparkContext.master.startswith("local"):
        return None
    if "://" in out and not out.startswith("file:"):
        return None
    return _local_dir(out).resolve()


def auto_bucket_ms(first: int | None, last: int | None, window_ms: int, buckets: int = 240) -> int:
    """A round bucket size giving at most `buckets` buckets over [first, last], never less
    than one quota window (1 s, 2 s, 5 s, 10 s, 15 s, 30 s, 1 min, ... 1 day)."""
    span = 0 if first is None or last is None else last - first
    for step in (1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
                 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000):
        if step >= window_ms and span / step <= buckets:
            return step
    return 86_400_000


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
    from app.kafka.spark_source.source import KafkaDataSource

    progress = progress or Progress(quiet=True)
    try:
        tolerance = diffmod.parse_tolerance(opts.tolerance)
    except ValueError as exc:
        raise AuditError(str(exc)) from None
    entities = []
    for raw in opts.entities:
        try:
            entities.append(parse_entity_string(raw))
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


__all__ = ["Compared", "Recomputed", "Sized", "auto_bucket_ms", "compare_phase", "recompute_phase",
           "run_audit", "size_phase", "summarize", "task_writable_dir"]
