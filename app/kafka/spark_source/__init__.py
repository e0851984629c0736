"""Read Kafka topics into Spark without a connector jar: a PySpark Python Data Source.

Why this exists: Spark's own Kafka source is a connector jar that PySpark's wheel does not ship
(`spark.read.format("kafka")` fails with KAFKA_DATA_SOURCE_NOT_ENABLED). Spark 4's Python Data
Source API lets a Python client (aiokafka) do the reading inside the executors, with the
project's own Kafka security settings, and returning Arrow record batches keeps it fast.

Usage::

    from app.kafka.spark_source.source import KafkaDataSource
    spark.dataSource.register(KafkaDataSource)
    df = (spark.read.format("quota_kafka")
          .option("bootstrap", "127.0.0.1:9092")
          .option("topics", "quota.events.request,quota.events.mutation")
          .option("starting_offsets", "earliest")          # or JSON, see below
          .option("ending_offsets", "latest")
          .load())

The schema is the one Spark's own Kafka source uses, minus headers:
`topic string, partition int, offset long, timestamp timestamp, key binary, value binary`.

Options (names are case-insensitive; Spark-style camelCase aliases are accepted):

- `bootstrap` (required): `host:port[,host:port]`.
- `topics` (required): comma-separated topic names. A topic that does not exist is an error
  (asking a broker for its metadata would make a cluster that auto-creates topics create it).
- `starting_offsets` / `ending_offsets`: `earliest`, `latest`, or JSON as in Spark's Kafka
  source, `{"topic": {"0": 1200, "1": -2}}`, where -2 means earliest and -1 latest. Partitions
  missing from the JSON use earliest (start) / latest (end). Defaults: earliest / latest for batch
  reads, latest for streams. Starts are inclusive, ends exclusive.
- `start_ts_ms` / `end_ts_ms`: keep only records whose timestamp (epoch ms) is in
  `[start_ts_ms, end_ts_ms)`. Filtered in the reader, after fetching (the planned offset ranges
  are not narrowed from the timestamps).
- `max_records_per_partition` (default 500000): offset ranges larger than this are split into
  equal chunks, one Spark task each, so a big partition does not serialise the job.
- `fail_on_data_loss` (default true): a requested start below the partition's log start (the
  records were deleted) is an error, because a job that silently skips records is wrong.
  With false the range starts at the log start instead.
- `batch_rows` (default 20000): rows per Arrow batch handed to Spark.
- `idle_timeout_s` (default 30): a read that makes no progress for this long fails instead of
  hanging or returning fewer records than planned.
- `max_records_per_trigger` (streaming only): cap on rows per micro-batch.
- `security_*`: how the driver and the executors reach Kafka, one option per `KafkaSecurity`
  field (`security_protocol`, `security_ca_file`, ..., `security_sasl_password`), as
  `KafkaSecurity.options()` writes them; none: PLAINTEXT. The executors may run where this
  process's environment is not, so the settings travel as options.

Planning happens on the driver: the partitions of each topic, their log start and their end.
Planning never trusts the end the reader sees: a task reads exactly `[start, end)` of its
(topic, partition) and fails if it cannot, so every record in the planned ranges is returned
exactly once.

`offsets` is that planning arithmetic (`parse_offsets`, `resolve_ranges`, `plan_partitions`,
`cap_offsets`), pure and importable without pyspark, so it is unit-tested without a JVM;
`options` parses the options above; `reader` is the broker side (a topic's partitions and their
ends, a range read into Arrow batches); `source` the Spark data source and its readers.

It may import what the rest of `app.kafka` may (its rules hold here); it is the one part of
`app.kafka` that imports pyspark, and it imports without it.
"""
