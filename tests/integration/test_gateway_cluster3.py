"""The gateway in front of three brokers (the module's 3-node cluster): one gateway port per
broker by the port rule, Metadata and FindCoordinator rewritten to those ports with partition
leaders on every broker, and a consumer group through the gateway."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app.kafka.topics import create_topics_sync
from app.devstack.kafka import KafkaCluster
from app.gateway import apis
from app.devstack.launcher import GatewayProcess, LocalCluster, isolated_env
from app.pipeline.topology import topic_specs
from app.settings import load
from tests.unit.kafka_frames import decode_response, request, request_body

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.test_gateway import _ask
except ImportError:  # pragma: no cover
    from test_gateway import _ask  # type: ignore[no-redef]

pytestmark = pytest.mark.integration

PARTITIONS = 6


@dataclass
class Three:
    kafka: KafkaCluster
    gateway: GatewayProcess
    topic: str

    @property
    def listen_port(self) -> int:
        return int(self.gateway.bootstrap.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def three(kafka_cluster3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Three]:
    plain = kafka_cluster3.bootstrap("PLAINTEXT")
    prefix = f"g3{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2"}
    create_topics_sync(plain, topic_specs(load(env)))
    topic = f"{prefix}-data"
    create_topics_sync(plain, [(topic, PARTITIONS, {})])
    cluster = LocalCluster(0, bootstrap=plain, work_dir=tmp_path_factory.mktemp("g3"), env=env)
    try:
        gateway = cluster.start_gateway("--no-create-topics", "--directives-timeout", "5")
        yield Three(kafka_cluster3, gateway, topic)
    finally:
        cluster.stop()


def test_every_broker_has_its_port_and_leaders_are_reached_there(three: Three) -> None:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": three.gateway.bootstrap}).list_topics(
        three.topic, timeout=30)
    base = three.listen_port
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
        n: ("127.0.0.1", base + n) for n in (1, 2, 3)}  # first node id 1, at the listen port + 1
    leaders = {p.leader for p in metadata.topics[three.topic].partitions.values()}
    assert leaders == {1, 2, 3}


def test_find_coordinator_names_the_coordinators_gateway_port(three: Three) -> None:
    """Asked again while the offsets topic is being created (COORDINATOR_NOT_AVAILABLE), as
    clients do."""
    body = request_body(apis.FIND_COORDINATOR, 3, key="group-g3-find", key_type=0)
    deadline = time.monotonic() + 30
    while True:
        answer = decode_response(apis.FIND_COORDINATOR, 3, _ask(three.gateway.bootstrap, request(
            apis.FIND_COORDINATOR, 3, body, correlation_id=5)))
        if answer.node_id >= 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert answer.node_id in (1, 2, 3), answer
    assert (answer.host, answer.port) == ("127.0.0.1", three.listen_port + answer.node_id)


def test_a_group_consumes_what_was_produced_to_every_broker_and_commits(three: Three) -> None:
    """kafka-python produces to the leaders on all three brokers; a confluent-kafka group
    consumes it all and commits at its coordinator, every connection through the gateway."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaProducer

    bootstrap = three.gateway.bootstrap
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    sent = {f"k{i}".encode(): uuid.uuid4().hex.encode() for i in range(600)}
    for partition, (key, value) in enumerate(sent.items()):
        producer.send(three.topic, value, key=key, partition=partition % PARTITIONS)
    producer.flush(30)
    producer.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "group-g3",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer.subscribe([three.topic])
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 60
    try:
        while len(got) < len(sent) and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    got[m.key()] = m.value()
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(three.topic, p)
                                        for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    assert got == sent
    assert sum(tp.offset for tp in committed) == len(sent)
