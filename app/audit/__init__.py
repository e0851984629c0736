"""app.audit: the PySpark audit, which recomputes every decision from the input topics (or an
archive) with the engine and compares the directives with the control topic.

The Spark job: `job` runs it in three phases and writes their outputs, `options` is what it is
asked, `session` its Spark session and progress lines, `input_plan` the input planned on the
driver (Kafka topics through `app.kafka.spark_source`, or `archive`, its file twin),
`kafka_reads` what the driver reads from Kafka itself, `frames` the DataFrames of each phase.

The recompute: `recompute` the ordering rules and what both steps share, `explode` step 1, `run`
step 2, `in_process` both without Spark; `event_codec`, `request_items` and `summaries` the
per-row work.

The rest: `diff` the comparator (pure: a spec of the statuses); `results`, `recommend`, `report`
the outputs; `explain` one entity's decisions (its text is `app.explanation`'s, which the
console shows too); `common` the small pieces (times, entity candidates) they share; `synth`
synthetic input for the tests.

It may import the engine, the intake, `app.contract` (the directive format, keys and entity
names), `app.explanation`, `app.kafka`, `app.settings`, `app.signing` and `app.errors`; `diff`
only `app.audit.common`, `app.signing` and `app.contract`.
"""
