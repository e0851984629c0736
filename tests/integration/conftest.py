"""Fixtures for tests that need Kafka: a real Apache Kafka cluster the project starts itself.

One single-node KRaft cluster serves the whole session (`kafka_cluster`), with a PLAINTEXT,
an SSL, a SASL_PLAINTEXT and a SASL_SSL listener and the users `admin`, `alice` and `bob`
(random passwords: `kafka_cluster.passwords`); a three-node cluster (`kafka_cluster3`) starts
for the first test that asks for it. Tests never write into a cluster someone configured with
KAFKA_BOOTSTRAP_SERVERS. Set QS_TEST_BOOTSTRAP=host:port to run the PLAINTEXT tests against
another cluster on purpose; topic names are unique per test, so a shared cluster is fine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.devstack.kafka import PROTOCOLS, KafkaCluster

USERS = ("admin", "alice", "bob")


def _cluster(brokers: int, tmp: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(brokers=brokers, listeners=PROTOCOLS, users=dict.fromkeys(USERS),
                           work_dir=tmp.mktemp(f"kafka{brokers}"))
    cluster.start()
    try:
        yield cluster
        if not cluster.running:
            pytest.fail(f"a Kafka node died during the tests; logs in {cluster.work_dir}")
    finally:
        cluster.stop(graceful=False)  # throwaway: its data goes with it


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """The session's single-node cluster, every listener on."""
    yield from _cluster(1, tmp_path_factory)


@pytest.fixture(scope="session")
def kafka_cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A three-node cluster (brokers 1, 2, 3), for leaders on different brokers, started for
    the first test that asks for it."""
    yield from _cluster(3, tmp_path_factory)


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """`host:port` of a PLAINTEXT listener: QS_TEST_BOOTSTRAP if set, else the session's."""
    external = os.environ.get("QS_TEST_BOOTSTRAP", "").strip()
    if external:
        return external
    cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")
    return cluster.bootstrap("PLAINTEXT")
