"""Every Kafka connection speaks TLS and SASL when told to: a worker, `produce`, `quotas` and
`explain` reach the cluster only through its SSL or SASL_SSL listener (the broker's certificate
checked, host name included; SCRAM-SHA-512 credentials), and the worker's directives equal
`replay`'s."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from app.audit.synth import CONFIGS, T0, scenario
from app.kafka.topics import create_topics_sync
from app.devstack.kafka import KafkaCluster, client_settings
from app.engine.engine import EngineSettings
from app.devstack.launcher import LocalCluster, isolated_env
from app.pipeline.topology import topic_specs
from app.intake.replay import replay
from app.settings import load

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.pipeline_io import assert_same, read_directives
except ImportError:  # pragma: no cover
    from pipeline_io import assert_same, read_directives  # type: ignore[no-redef]

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def tool(env: dict[str, str], *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], input=stdin, cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, timeout=120)


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_worker_and_tools_over_tls(kafka_cluster: KafkaCluster, tmp_path: Path,
                                   listener: str) -> None:
    plain = kafka_cluster.bootstrap("PLAINTEXT")
    prefix = f"s{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "broker",
           "QS_FLUSH_INTERVAL_MS": "500", "QS_STATE_DIR": str(tmp_path / "state")}
    create_topics_sync(plain, topic_specs(load(env)))
    secure = {**env, **client_settings(kafka_cluster, listener, user="admin")}
    worker = LocalCluster(1, bootstrap=secure["KAFKA_BOOTSTRAP_SERVERS"],
                          work_dir=tmp_path / "worker", env=secure)
    try:
        events = scenario(seed=31, start_ms=T0, seconds=6)
        lines = b"\n".join(orjson.dumps(r) for r in CONFIGS + events) + b"\n"
        sent = tool(secure, "produce", "-", "--partition", "0", "--no-create-topics", stdin=lines)
        assert sent.returncode == 0, sent.stderr.decode()[-2000:]
        described = tool(secure, "quotas", "describe", "--json")
        assert described.returncode == 0, described.stderr.decode()[-2000:]
        assert "/config/users/<default>" in described.stdout.decode()
        # without TLS the same listener is refused, in one line
        refused = tool({**secure, "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, "quotas", "describe")
        assert refused.returncode == 2 and len(refused.stderr.decode().strip().splitlines()) == 1

        worker.start_worker(0)
        worker.wait_ready(timeout=120)
        expected = [orjson.dumps(d) for r in replay([orjson.dumps(x) for x in CONFIGS + events],
                                                    EngineSettings(scope="broker"))
                    for d in r.directives]
        live = asyncio.run(read_directives(plain, env["QS_TOPIC_DIRECTIVES"],
                                           len(expected), timeout=120))
        assert_same(live, expected)

        explained = tool(secure, "explain", "--input", "kafka", "--entity", "user=alice",
                         "--at", str(T0 + 6000))
        assert explained.returncode == 0, explained.stderr.decode()[-2000:]
        assert "producer_byte_rate" in explained.stdout.decode()
    finally:
        worker.stop()
