"""Every Kafka connection speaks TLS when told to: a worker, `produce`, `quotas` and `explain`
reach the cluster only through a TLS listener, and the worker's directives equal `replay`'s.

The embedded broker cannot serve TLS (Tansu 0.6.0 refuses `--cert` with `--key`), so the TLS
listener is the project's gateway terminating TLS in front of it, with a certificate the
clients check (host name included). The gateway sends its usage events to topics of its own.
"""

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
from app.broker import create_topics_sync
from app.engine.engine import EngineSettings
from app.launcher import LocalCluster, isolated_env
from app.pipeline.topology import topic_specs
from app.replay import replay
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


def test_worker_and_tools_over_tls(kafka_bootstrap: str, tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    prefix = f"s{uuid.uuid4().hex[:8]}"
    front = LocalCluster(0, bootstrap=kafka_bootstrap, work_dir=tmp_path / "gateway",
                         env={**isolated_env(f"{prefix}gw"), "QS_VERIFY_END_OFFSETS": "1"})
    front.start_broker()
    gateway = front.start_gateway("--tls-cert", str(cert), "--tls-key", str(key),
                                  "--no-local-quotas")
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "broker",
           "QS_VERIFY_END_OFFSETS": "1", "QS_FLUSH_INTERVAL_MS": "500",
           "QS_STATE_DIR": str(tmp_path / "state"),
           "KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CAFILE": str(cert)}
    create_topics_sync(kafka_bootstrap, topic_specs(load(env)))  # plaintext, on the broker
    secure = {**env, "KAFKA_BOOTSTRAP_SERVERS": gateway.bootstrap}
    worker = LocalCluster(1, bootstrap=gateway.bootstrap, work_dir=tmp_path / "worker", env=env)
    try:
        events = scenario(seed=31, start_ms=T0, seconds=6)
        lines = b"\n".join(orjson.dumps(r) for r in CONFIGS + events) + b"\n"
        sent = tool(secure, "produce", "-", "--partition", "0", "--no-create-topics", stdin=lines)
        assert sent.returncode == 0, sent.stderr.decode()[-2000:]
        described = tool(secure, "quotas", "describe", "--json")
        assert described.returncode == 0, described.stderr.decode()[-2000:]
        assert "/config/users/<default>" in described.stdout.decode()
        # without TLS the same listener is refused, in one line
        plain = tool({**secure, "KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}, "quotas", "describe")
        assert plain.returncode == 2 and len(plain.stderr.decode().strip().splitlines()) == 1

        worker.start_worker(0)
        worker.wait_ready(timeout=120)
        expected = [orjson.dumps(d) for r in replay([orjson.dumps(x) for x in CONFIGS + events],
                                                    EngineSettings(scope="broker"))
                    for d in r.directives]
        live = asyncio.run(read_directives(kafka_bootstrap, env["QS_TOPIC_DIRECTIVES"],
                                           len(expected), timeout=120))
        assert_same(live, expected)

        explained = tool(secure, "explain", "--input", "kafka", "--entity", "user=alice",
                         "--at", str(T0 + 6000))
        assert explained.returncode == 0, explained.stderr.decode()[-2000:]
        assert "producer_byte_rate" in explained.stdout.decode()
    finally:
        worker.stop()
        front.stop()
