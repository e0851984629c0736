"""The development stack: a real Apache Kafka cluster on loopback (`kafka`), the certificates
its TLS listeners use (`certs`), for the demo, `quota-streams broker` and the tests.

Nothing in the product imports this package: a deployment points every component at its own
cluster with KAFKA_BOOTSTRAP_SERVERS. It may import the standard library and `app.errors`.
"""
