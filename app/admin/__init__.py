"""Admin tooling behind `quota-streams quotas`, `produce` and `directives` (no argparse here
except the kafka-configs entity options, which need an ordered argparse action).

- `entities`: kafka-configs style arguments (`--entity-type/--entity-name/--entity-default`,
  `--add-config/--delete-config`) into contract `quota_config` records, validated by
  `app.engine.configs.parse_config_record`, exactly as the workers validate them.
- `config_topic`: writing with the compaction-safe record key (`app.contract.keys`), the
  entity partitioner, reading the config
  topic back into a `QuotaConfigs` (through the workers' own `ConfigFollower.apply`).
- `views`: what `describe` and `resolve` show, and plain-text tables (colour on a terminal).
- `routing`: which topic, key and value each contract line of `produce` goes to.
- `common`: KAFKA_BOOTSTRAP_SERVERS and one-line errors for anything Kafka throws.

It may import the engine, the intake, `app.contract`, `app.kafka`, `app.settings`,
`app.signing` and `app.errors`; the commands and the simulator build on it.
"""
