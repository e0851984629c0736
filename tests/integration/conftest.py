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
from pathlib import Path

import pytest

from app.devstack.kafka import PROTOCOLS, KafkaCluster

USERS = ("admin", "alice", "bob")
#: lines of each process log a failed test's report shows: its warnings and errors, and its end
LOG_PROBLEMS, LOG_TAIL = 20, 15


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """A failed test's report carries what its workers and gateways logged (their logs are in
    its tmp_path, gone with CI's machine)."""
    report = yield
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if report.failed and isinstance(tmp, Path):
        for log in sorted(tmp.glob("*.log")):
            report.sections.append((f"{log.name} (warnings, errors and its end)", log_digest(log)))
    return report


def log_digest(log: Path) -> str:
    """A process log's last warnings and errors, then its last lines."""
    lines = log.read_text(errors="replace").splitlines()
    problems = [line for line in lines if "[WARNING]" in line or "[ERROR]" in line
                or "Traceback" in line]
    return "\n".join([*problems[-LOG_PROBLEMS:], "...", *lines[-LOG_TAIL:]])


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
