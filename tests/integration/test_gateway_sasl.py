"""The gateway in front of the session cluster's SASL listeners, with real clients of every
library (confluent-kafka, kafka-python, aiokafka and Java's kafka-clients) authenticating with
SCRAM-SHA-512 through it.

Gateway A is in front of SASL_PLAINTEXT with no node flags: it starts without a Metadata probe
and learns the brokers from the first client that authenticates. Gateway B is in front of
SASL_SSL with the node flags, checking the brokers' certificate. Both, and the worker, connect to
Kafka for their own topics over SASL_SSL (the product's KAFKA_* settings, user admin).

Every library has a user of its own, `u-<library>`, with a per-user `producer_byte_rate` and
`consumer_byte_rate`: the quotas hold only if the gateway charged each request to the principal
the broker accepted. Producers go through A, consumers through B, all at once for LOOP_S
seconds; rates are measured and bounded as in test_gateway.py (the least-squares slope after
the warm-up, within [0.85, 1.1] of the quota), each user's quota being the same QUOTA.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.admin.config_topic import write_records
from app.admin.entities import canonical_record
from app.kafka.topics import create_topics_sync
from app.clients.runner import ROOT, run_clients
from app.clients.security import AUTHENTICATION_FAILED
from app.devstack.kafka import KafkaCluster, client_settings
from app.engine.configs import parse_config_record
from app.kafka.whole_topic import read_topic
from app.devstack.launcher import GatewayProcess, LocalCluster, isolated_env
from app.pipeline.topology import topic_specs
from app.settings import load

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.test_gateway import QUOTA, LIBRARIES, assert_gets_quota, fill, quota
except ImportError:  # pragma: no cover
    from test_gateway import (  # type: ignore[no-redef]
        QUOTA, LIBRARIES, assert_gets_quota, fill, quota)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LOOP_S, WARMUP_S = 40.0, 8.0
MECHANISM = "SCRAM-SHA-512"


@dataclass
class SaslStack:
    kafka: KafkaCluster
    cluster: LocalCluster
    plaintext: GatewayProcess  # in front of SASL_PLAINTEXT, nodes learned
    tls: GatewayProcess  # in front of SASL_SSL, nodes from the flags
    topic: str
    source: str
    passwords: dict[str, str]
    requests_topic: str  # the gateways' request events

    def flags(self, user: str, password: str | None = None) -> list[str]:
        return ["--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", MECHANISM,
                "--sasl-username", user, "--sasl-password", password or self.passwords[user]]


def add_scram_users(bootstrap: str, passwords: dict[str, str]) -> None:
    """SCRAM-SHA-512 users, created at run time (AlterUserScramCredentials)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                     password.encode()) for user, password in passwords.items()])
    for future in futures.values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def sasl_stack(kafka_cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[SaslStack]:
    tmp = tmp_path_factory.mktemp("gateway-sasl")
    plain = kafka_cluster.bootstrap("PLAINTEXT")
    prefix = f"gs{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "cluster",
           "QS_ACCOUNTING": "served", "QS_QUOTA_WINDOW_SIZE_MS": "500",
           "QS_CONTROLLER_WINDOW_SIZE_MS": "500", "QS_STATE_DIR": str(tmp / "state")}
    create_topics_sync(plain, topic_specs(load(env)))
    passwords = {f"u-{lib}": uuid.uuid4().hex for lib in LIBRARIES}
    add_scram_users(plain, passwords)
    updates = [parse_config_record(quota({"user": user}, producer_byte_rate=QUOTA,
                                         consumer_byte_rate=QUOTA)) for user in passwords]
    asyncio.run(write_records(plain, env["QS_TOPIC_CONFIGS"],
                              [(canonical_record(u), u) for u in updates], None))
    topic, source = f"{prefix}-data", f"{prefix}-source"
    create_topics_sync(plain, [(topic, 2, {}), (source, 2, {})])
    fill(plain, source, 16 * 1024 * 1024)
    own = {**env, **client_settings(kafka_cluster, "SASL_SSL", user="admin", mechanism=MECHANISM)}
    cluster = LocalCluster(1, bootstrap=own["KAFKA_BOOTSTRAP_SERVERS"], work_dir=tmp, env=own)
    try:
        cluster.start_worker(0)
        cluster.wait_ready(timeout=120)
        a = cluster.start_gateway("--upstream-sasl", "--listener-name", "SASL_PLAINTEXT",
                                  "--no-create-topics",
                                  upstream=kafka_cluster.bootstrap("SASL_PLAINTEXT"))
        b = cluster.start_gateway("--upstream-sasl", "--upstream-ca", str(kafka_cluster.ca),
                                  "--first-node-id", "1", "--bootstrap-node-id", "1",
                                  "--listener-name", "SASL_SSL", "--no-create-topics",
                                  upstream=kafka_cluster.bootstrap("SASL_SSL"))
        yield SaslStack(kafka_cluster, cluster, a, b, topic, source, passwords,
                        env["QS_TOPIC_REQUEST"])
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def sasl_loop(sasl_stack: SaslStack, tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, list[dict[str, Any]]]:
    """A producer (4x its quota) through A and a consumer through B per library, together."""
    s = sasl_stack
    produce = lambda lib: [  # noqa: E731
        "produce", "--library", lib, "--bootstrap", s.plaintext.bootstrap, "--topic", s.topic,
        "--client-id", f"p-{lib}", "--rate", str(4 * QUOTA), *s.flags(f"u-{lib}")]
    consume = lambda lib: [  # noqa: E731
        "consume", "--library", lib, "--bootstrap", s.tls.bootstrap, "--topic", s.source,
        "--client-id", f"c-{lib}", "--group", f"sasl-{lib}", *s.flags(f"u-{lib}")]
    return run_clients([(f"{kind}-{lib}", ["--seconds", str(LOOP_S), *argv(lib)])
                        for lib in LIBRARIES for kind, argv in (("p", produce), ("c", consume))],
                       timeout=150, log_dir=CLIENT_LOGS.setdefault(
                           "dir", tmp_path_factory.mktemp("sasl-clients")))


#: where the loop's clients left their logs (their libraries' stderr)
CLIENT_LOGS: dict[str, Path] = {}


def client_log(name: str, tail: int = 3000) -> str:
    """The end of a loop client's log, for an assertion's message."""
    path = CLIENT_LOGS.get("dir")
    return (path / f"{name}.log").read_text(errors="replace")[-tail:] if path else ""


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_users_producer_byte_rate_holds_through_the_gateway(
        sasl_loop: dict[str, Any], library: str) -> None:
    assert_gets_quota(sasl_loop[f"p-{library}"], library, WARMUP_S, LOOP_S)


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_users_consumer_byte_rate_holds_through_the_gateway(
        sasl_loop: dict[str, Any], library: str) -> None:
    assert_gets_quota(sasl_loop[f"c-{library}"], library, WARMUP_S, LOOP_S,
                      client_log(f"c-{library}"))


def test_every_request_is_charged_to_the_user_the_broker_accepted(
        sasl_loop: dict[str, Any], sasl_stack: SaslStack) -> None:
    """The gateways' request events of the loop's clients name their SCRAM users, and nothing
    before authentication (ApiVersions is the authenticator's) is charged to ANONYMOUS."""
    records = asyncio.run(read_topic(sasl_stack.kafka.bootstrap("PLAINTEXT"),
                                     sasl_stack.requests_topic))
    users: dict[str, set[str]] = defaultdict(set)
    for record in records:
        for event in orjson.loads(record.value)["events"]:
            users[event["client_id"]].add(event["user"])
    for lib in LIBRARIES:
        assert users[f"p-{lib}"] == users[f"c-{lib}"] == {f"u-{lib}"}, (lib, users)


def test_the_gateway_learned_its_brokers_from_the_first_authenticated_client(
        sasl_loop: dict[str, Any], sasl_stack: SaslStack) -> None:
    log = sasl_stack.plaintext.log.read_text(errors="replace")
    assert "brokers learned once a client has authenticated" in log
    assert "bootstrap connections reach broker 1" in log


def test_a_wrong_password_is_the_brokers_authentication_error_in_every_library(
        sasl_stack: SaslStack, tmp_path: Path) -> None:
    """Each library stops with its report of the broker's refusal (exit 3), through both
    gateways, long before its run (120 s) would have ended: not a hang, not a retry loop."""
    s = sasl_stack
    procs = {}
    for lib in LIBRARIES:
        for gateway in (s.plaintext, s.tls):
            argv = ["produce", "--library", lib, "--bootstrap", gateway.bootstrap, "--topic",
                    s.topic, "--client-id", f"wrong-{lib}", "--rate", "1000",
                    *s.flags("alice", password="wrong")]
            procs[(lib, gateway.bootstrap)] = subprocess.Popen(
                [sys.executable, "-m", "app.clients", "--seconds", "120", *argv], cwd=ROOT,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    for (lib, gateway), proc in procs.items():
        _out, err = proc.communicate(timeout=100)
        lines = err.strip().splitlines()
        assert proc.returncode == AUTHENTICATION_FAILED, (lib, gateway, err[-2000:])
        assert lines[-1].startswith("authentication failed: ") and "uthentication failed" in \
            lines[-1].removeprefix("authentication failed: "), (lib, lines[-1])
    assert time.monotonic() - started < 60
