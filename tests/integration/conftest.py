"""Fixtures for tests that need a Kafka-protocol broker.

Tests always use their own embedded Tansu broker (memory storage, one per test session), so they
never write into a cluster someone configured with KAFKA_BOOTSTRAP_SERVERS. Set
QS_TEST_BOOTSTRAP=host:port to run them against another broker on purpose. Topic names in
these tests are unique per test, so a shared broker is fine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`host:port` of a running broker: QS_TEST_BOOTSTRAP if set, else an embedded Tansu.

    The embedded broker's log is kept in pytest's temp dir (`tansu.log`) for post-mortems.
    """
    external = os.environ.get("QS_TEST_BOOTSTRAP", "").strip()
    if external:
        yield external
        return
    log_path = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker.bootstrap
        if not broker.running:
            pytest.fail(f"the embedded broker died during the tests; log: {log_path}")


@pytest.fixture(scope="session")
def embedded_broker_only(kafka_bootstrap: str) -> str:
    """Skip tests that demonstrate Tansu-specific behaviour when an external broker is used."""
    if os.environ.get("QS_TEST_BOOTSTRAP", "").strip():
        pytest.skip("demonstrates a Tansu 0.6.0 quirk; QS_TEST_BOOTSTRAP points elsewhere")
    return kafka_bootstrap
