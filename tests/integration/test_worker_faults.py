"""A worker whose agent dies exits non-zero (for the orchestrator to restart it) instead of
running on with partitions nobody processes; SIGTERM stops a busy worker promptly; a restarted
worker judges timestamps by the partition's history, not by its first record."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from app.audit.synth import CONFIGS, T0, scenario
from app.launcher import LocalCluster

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.pipeline_io import read_directives, wait_committed
except ImportError:  # pragma: no cover
    from pipeline_io import read_directives, wait_committed  # type: ignore[no-redef]

pytestmark = pytest.mark.integration
MARKER = "crash-here-7f3a"


def worker_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    prefix = f"f{uuid.uuid4().hex[:8]}"
    return {"QS_APP_ID": prefix, "QS_PARTITIONS": "2",
            "QS_TOPIC_REQUEST": f"{prefix}.request", "QS_TOPIC_CONNECTION": f"{prefix}.connection",
            "QS_TOPIC_MUTATION": f"{prefix}.mutation", "QS_TOPIC_CONFIGS": f"{prefix}.configs",
            "QS_TOPIC_DIRECTIVES": f"{prefix}.directives",
            "QS_TOPIC_DEADLETTER": f"{prefix}.deadletter", "QS_VERIFY_END_OFFSETS": "1",
            "QS_STATE_DIR": str(tmp_path / "state"), **extra}


async def send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send(topic, value, partition=0)
        await producer.flush()
    finally:
        await producer.stop()


def wait_exit(cluster: LocalCluster, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = cluster.procs[0].poll()
        if code is not None:
            return code
        time.sleep(0.2)
    return None


def test_an_agent_that_dies_takes_the_worker_down(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = worker_env(tmp_path, QS_TEST_CRASH_MARKER=MARKER, PYTHONPATH=os.pathsep.join(
        filter(None, [str(Path(__file__).parent / "crash_on_marker"), os.environ.get("PYTHONPATH")])))
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        cluster.start()
        cluster.wait_ready()
        bad = orjson.dumps({"type": "request", "v": 1, "ts": T0, "broker": 1, "user": MARKER,
                            "client_id": "c", "api": "Produce", "bytes": 1})
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_REQUEST"], [bad]))
        code = wait_exit(cluster, 60)
        assert code is not None, "the worker ran on with a dead agent"
        assert code != 0
        log = (tmp_path / "worker-0.log").read_text(errors="replace")
        assert "injected crash" in log
    finally:
        cluster.stop()


def test_sigterm_stops_a_busy_worker_promptly(kafka_bootstrap: str, tmp_path: Path) -> None:
    env = worker_env(tmp_path)
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        cluster.start()
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_CONFIGS"],
                         [orjson.dumps(c) for c in CONFIGS]))
        cluster.wait_ready()
        records = [orjson.dumps(r) for r in scenario(seed=3, start_ms=T0, seconds=60)
                   if r["type"] == "batch"]
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_REQUEST"], records))
        time.sleep(1)  # mid-stream
        started = time.monotonic()
        cluster.procs[0].send_signal(signal.SIGTERM)
        code = wait_exit(cluster, 30)
        assert code is not None, "SIGTERM did not stop the worker within 30 s"
        assert time.monotonic() - started < 30
    finally:
        cluster.stop()


def test_a_junk_timestamp_first_after_a_restart_costs_only_itself(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """The stream clock is rebuilt from the records before the restarted worker's first one:
    a `ts: 0` event there is dead-lettered alone. A clock starting empty would accept it and
    dead-letter the good event after it."""
    env = worker_env(tmp_path)
    topic = env["QS_TOPIC_REQUEST"]
    batches = [orjson.dumps(r) for r in scenario(seed=5, start_ms=T0, seconds=20)
               if r["type"] == "batch"]
    half = len(batches) // 2
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        cluster.start()
        asyncio.run(send(kafka_bootstrap, env["QS_TOPIC_CONFIGS"],
                         [orjson.dumps(c) for c in CONFIGS]))
        cluster.wait_ready()
        asyncio.run(send(kafka_bootstrap, topic, batches[:half]))
        asyncio.run(wait_committed(kafka_bootstrap, env, timeout=120))
        cluster.kill_worker(0, signal.SIGKILL)
        junk = {"type": "request", "v": 1, "ts": 0, "broker": 1, "user": "junk",
                "client_id": "c", "api": "Produce", "bytes": 1}
        asyncio.run(send(kafka_bootstrap, topic, [orjson.dumps(junk)] + batches[half:]))
        cluster.start_worker(0)
        cluster.wait_ready()
        asyncio.run(wait_committed(kafka_bootstrap, env, timeout=120))
        dead = [orjson.loads(v) for v in asyncio.run(
            read_directives(kafka_bootstrap, env["QS_TOPIC_DEADLETTER"], 1, timeout=20))]
        assert [d["value"] for d in dead] == [junk]
        assert "from the stream time" in dead[0]["reason"]
    finally:
        cluster.stop()
