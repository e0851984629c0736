"""The development stack: a real Apache Kafka cluster on loopback (`kafka`), the certificates
its TLS listeners use (`certs`), Kafka's own client quotas set on it (`client_quotas`), brokers
running the broker plugin (`broker_plugin`), and the
launcher that starts the product on it as an operator would (`launcher`: the topics, workers and
gateways as processes), and a Spark standalone cluster from the installed pyspark (`spark`), for
the demo, `quota-streams broker`, the simulator, the benchmarks and the tests.

No product package imports this one: a deployment points every component at its own cluster
with KAFKA_BOOTSTRAP_SERVERS. It may import the product (`app.kafka` to create topics,
`app.pipeline.topology` for their specs, `app.settings`, `app.errors`), never a tool built on it
(commands, demo, sim, clients).
"""
