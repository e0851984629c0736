"""The audit's input planned on the driver: the records step 1 reads (Kafka topics through the
data source, or an archive), its streams, the configs, the control directives."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.audit.kafka_reads import WHOLE_PARTITION, clock_seeds, existing_topics, read_configs
from app.audit.options import AuditError, AuditOptions
from app.audit.recompute import MODE_FILE, MODE_KAFKA, ConfigEntry, archive_configs, topic_configs
from app.audit.session import Progress

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class InputPlan:
    """What phase 1 reads, and what the summary says of it."""

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


def plan_kafka(spark: SparkSession, opts: AuditOptions, progress: Progress) -> InputPlan:
    """Kafka input: each partition of an event topic a stream, read whole by one task."""
    from app.kafka.spark_source.offsets import resolve_ranges
    from app.kafka.spark_source.options import KafkaSourceOptions
    from app.kafka.spark_source.reader import probe_partitions

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
        configs, bad = read_configs(opts.bootstrap, opts.topics.configs, opts.security,
                                    opts.signing)
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


def read_control_files(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Directive archives (JSON lines) as `value` rows with a stable order (and no `key`: the
    comparator derives it, `app.audit.diff.parse_directive`)."""
    from pyspark.sql import functions as F

    lines = spark.read.text(paths).where(F.trim(F.col("value")) != "")
    return lines.select(F.lit(0).cast("long").alias("partition"),
                        F.monotonically_increasing_id().alias("offset"),
                        F.col("value").cast("binary").alias("value"))


def plan_archive(spark: SparkSession, opts: AuditOptions, progress: Progress) -> InputPlan:
    """Archive input: Kafka-shaped dumps keep Kafka's streams; other archives are one stream."""
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


__all__ = ["InputPlan", "plan_archive", "plan_kafka", "read_control_files"]
