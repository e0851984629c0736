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
def kafka_bootstrap() -> Iterator[str]:
    """`host:port` of a running broker: QS_TEST_BOOTSTRAP if set, else an embedded Tansu."""
    external = os.environ.get("QS_TEST_BOOTSTRAP", "").strip()
    if external:
        yield external
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def embedded_broker_only(kafka_bootstrap: str) -> str:
    """Skip tests that demonstrate Tansu-specific behaviour when an external broker is used."""
    if os.environ.get("QS_TEST_BOOTSTRAP", "").strip():
        pytest.skip("demonstrates a Tansu 0.6.0 quirk; QS_TEST_BOOTSTRAP points elsewhere")
    return kafka_bootstrap
