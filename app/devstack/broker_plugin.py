"""A local cluster whose brokers run the broker plugin (docs/broker-plugin.md): the jar `make
setup` builds and the properties that point it at one stack's topics, with Kafka's own quota
windows unless told otherwise. For the tests and benchmarks that hold quotas in the brokers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.devstack.kafka import ROOT, KafkaCluster

PLUGIN_JAR = ROOT / "jvm" / "broker-plugin" / "target" / "quota-streams-broker-plugin.jar"


def plugin_properties(env: Mapping[str, str], brokers: int = 3) -> dict[str, str]:
    """The brokers' properties for the plugin of the stack whose settings are `env` (its
    `QS_TOPIC_*`, as `launcher.isolated_env` gives them)."""
    return {
        "client.quota.callback.class": "io.quotastreams.broker.QuotaCallback",
        "metric.reporters": "io.quotastreams.broker.UsageReporter",
        "quota.streams.control.topic": env["QS_TOPIC_DIRECTIVES"],
        "quota.streams.request.topic": env["QS_TOPIC_REQUEST"],
        "quota.streams.config.topic": env["QS_TOPIC_CONFIGS"],
        "quota.streams.brokers": str(brokers),
        # the workers create the stack's topics: the reporter, writing from the start, must not
        # create the request topic first with the broker's default partitions
        "auto.create.topics.enable": "false",
    }


def plugin_cluster(env: Mapping[str, str], work_dir: Path, brokers: int = 3,
                   extra: Mapping[str, str] | None = None,
                   metrics_rules: Path | None = None) -> KafkaCluster:
    """`brokers` brokers running the plugin for the stack of `env` (not started); `extra` adds
    broker properties (a `quota.window.num`, say); `metrics_rules` runs the JMX exporter in
    each with those rules (deploy/broker-plugin/metrics/jmx-exporter.yaml)."""
    return KafkaCluster(brokers=brokers, work_dir=work_dir, classpath=(PLUGIN_JAR,),
                        broker_config={**plugin_properties(env, brokers), **(extra or {})},
                        metrics_rules=metrics_rules)


def create_assigned_topic(bootstrap: str, topic: str, replicas: list[list[int]],
                          config: Mapping[str, str] | None = None) -> None:
    """`topic` with each partition's replicas given, its leader first: partitions led by chosen
    brokers (kafka-python's admin client: confluent-kafka 2.16 refuses a replica assignment)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="quota-streams-devstack")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1,
                                      replica_assignments=dict(enumerate(replicas)),
                                      topic_configs=dict(config or {}))])
    finally:
        admin.close()
