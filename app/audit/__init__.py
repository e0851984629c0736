"""app.audit: the PySpark audit, which recomputes every decision from the input topics (or an
archive) with the engine and compares the directives with the control topic.

`job` runs the phases over `app.kafka.spark_source` (the `quota_kafka` Spark data source) or
`archive`, its file twin; `recompute` the ordering rules, `event_codec`, `request_items` and `summaries` the
per-row work; `diff` the comparator (pure: a spec of the statuses); `results`, `recommend`,
`report` the outputs; `explain` one entity's decisions; `synth` synthetic input for the tests.

It may import the engine, the intake, `app.contract` (the directive format and keys),
`app.kafka`, `app.settings`, `app.signing` and `app.errors`; `diff` only `app.audit.common`,
`app.signing` and `app.contract`.
"""
