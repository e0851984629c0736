"""Real Kafka client programs, for the demo and the gateway's tests.

Each is an ordinary client of one library (confluent-kafka, kafka-python, aiokafka, Java's
kafka-clients or, for produce and consume, KafkaJS), run as its own process (`python -m app.clients KIND ...`) against any bootstrap address, so what goes
through the gateway is what those libraries really send. Every second it prints one JSON line
with what it achieved in that second (bytes delivered or consumed, connections accepted, topics
created or rejected); the demo's view and the tests read those lines.

They may import `app.kafka` (security options), `app.errors`, `app.devstack` (the pinned Java
client), `app.sim`'s figures and tables, and `app.commands.support`'s argparse types for
their command line; no product package imports them.
"""
