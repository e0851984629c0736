"""Kafka I/O in one place: what the components share, and the Spark data source.

- `security`: the TLS/SASL settings of every Kafka connection, as each client library's options;
- `clients`: short-lived aiokafka consumers and producers, and topic questions that never make
  a cluster auto-create a topic (`partitions_of`, `topic_exists`);
- `topics`: creating the product's topics with explicit partition counts and configs;
- `offsets`: where a partition ends (ListOffsets, or a following consumer's last Fetch);
  `whole_topic`: a topic read once to its end;
- `config_follower`: the config topic followed onto the engine's timeline (workers, gateways,
  the admin tools); `clock_seed`: a source partition's stream clock read back from its records;
- `supervision`: reader loops (followers, subscribers) that cannot die unnoticed;
- `spark_source`: the `quota_kafka` Spark data source, topics read into DataFrames by Spark's
  executors (the audit's input; its planning arithmetic imports without pyspark).

It may import the engine, the intake and `app.signing`, never a driver or a tool (pipeline,
gateway, audit, sim, admin, commands, demo) nor the dev stack: the drivers build on it. Nor
`app.settings`: each connection's `KafkaSecurity` and each reader's `Signing` come from its
owner, who built them from the settings. Only `spark_source` imports pyspark (the workers
and the gateway never import it).
"""
