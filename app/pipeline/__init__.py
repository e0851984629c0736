"""app.pipeline: the worker, a Faust application built from settings (`worker`, `faust_app`):
brokers' events in through the intake, samples re-keyed onto the internal topic (`ingest`,
`codec`, `partitioner`), the engine on each entity's windows (`aggregate`), directives out; its
topics (`topology`), offset continuity, every Faust patch with why (`faust_patches`) and the
metrics it serves (`metrics`, its lag from `lag_meter`), and the console's pages
(`app.console`) over its windows.

It may import the engine, the intake, `app.contract` (the directive record's key), `app.kafka`,
`tables`, `app.console`, `app.settings`, `app.signing`, `app.errors` and `app.gc_tuning`;
nothing imports it
but the tools (commands, and the dev stack for the topics' specs).
"""
