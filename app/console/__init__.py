"""The quota console: one web page, served by every worker, showing who is throttled, why, and
how close every entity is to its quota (`app.console.web` serves it, `app.console.service`
answers its questions cluster-wide, `app.console.index` holds what a worker knows, `query` and
`detail` shape the overview's and an entity's answers).

It may import the engine, `app.contract` (entity names), `app.explanation` (the text `explain`
prints), `app.admin` (quota changes through the code of `quotas alter`), `app.kafka`,
`app.signing` and `app.errors`; the worker (`app.pipeline`) serves it."""
