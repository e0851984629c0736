"""The audit on a Spark standalone cluster: a master and two workers on loopback (their own JVMs,
from pyspark's `spark-class`), `quota-streams audit --master spark://...` against a live Kafka,
with the same summaries, diff and decisions as `--master local[2]`, bit for bit."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import orjson
import pyarrow.parquet as pq
import pytest

from app.audit import synth
from app.devstack.spark import SparkStandalone, loopback_env
from app.engine.engine import EngineSettings
from app.intake.replay import replay

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.pipeline_io import config_record_key
except ImportError:  # pragma: no cover
    from pipeline_io import config_record_key  # type: ignore[no-redef]

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    cluster = SparkStandalone(tmp_path_factory.mktemp("spark"), workers=2, cores=1, memory="1g")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def produce(bootstrap: str, by_topic: dict[str, list[tuple[bytes | None, bytes]]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for topic, records in by_topic.items():
            for key, value in records:
                await producer.send(topic, value, key=key, partition=0)
        await producer.flush()
    finally:
        await producer.stop()


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str) -> dict[str, str]:
    """Event, config and control topics holding a scenario and the directives `replay` gives
    for it, one of them altered (so the diff has something to find)."""
    prefix = f"cl{uuid.uuid4().hex[:8]}"
    names = {k: f"{prefix}.{k}" for k in ("request", "connection", "mutation", "configs",
                                          "directives")}
    records = synth.scenario(seed=9, seconds=8, brokers=3)
    lines = [orjson.dumps(c) for c in synth.CONFIGS] + [orjson.dumps(r) for r in records]
    directives = [orjson.dumps(d) for result in replay(lines, EngineSettings(scope="broker"))
                  for d in result.directives]
    assert len(directives) > 20
    changed = orjson.loads(directives[5])
    changed["throttle_time_ms"] += 3
    directives[5] = orjson.dumps(changed)
    by_topic: dict[str, list[tuple[bytes | None, bytes]]] = {
        names["configs"]: [(config_record_key(c), orjson.dumps(c)) for c in synth.CONFIGS]}
    for record in records:
        kind = synth.topic_of(record)
        by_topic.setdefault(names[kind], []).append((None, orjson.dumps(record)))
    by_topic[names["directives"]] = [(None, d) for d in directives]
    asyncio.run(produce(kafka_bootstrap, by_topic))
    return {**names, "bootstrap": kafka_bootstrap}


def audit(master: str, topics: dict[str, str], out: Path) -> dict[str, Any]:
    """`quota-streams audit` as a user runs it; its summary.json."""
    args = [sys.executable, "-m", "app.cli", "audit", "--master", master, "--bootstrap",
            topics["bootstrap"], "--out", str(out), "--decisions", "--no-report", "--quiet",
            "--partitions", "2", "--scope", "broker", "--driver-memory", "768m",
            *(a for k in ("request", "connection", "mutation", "configs", "directives")
              for a in (f"--topic-{k}", topics[k]))]
    done = subprocess.run(args, env=loopback_env(), cwd=ROOT, capture_output=True, timeout=600)
    assert done.returncode == 1, done.stderr.decode(errors="replace")[-3000:]  # one mismatch
    return dict(json.loads((out / "summary.json").read_text()))


def dataset(out: Path, name: str) -> list[dict[str, Any]]:
    """Every row of an output dataset, in one order whatever the partitioning."""
    return sorted(pq.read_table(out / name).to_pylist(), key=repr)


def test_the_audit_on_a_standalone_cluster_equals_the_local_one(
        standalone: SparkStandalone, topics: dict[str, str], tmp_path: Path) -> None:
    before = {app["id"] for app in standalone.state().get("completedapps", [])}  # type: ignore[union-attr]
    cluster = audit(standalone.url, topics, tmp_path / "cluster")
    apps = [a for a in standalone.state()["completedapps"]  # type: ignore[union-attr]
            if a["id"] not in before]
    assert len(apps) == 1 and apps[0]["cores"] == 2  # it ran on both workers' executors
    local = audit("local[2]", topics, tmp_path / "local")

    for summary in (cluster, local):
        assert summary["diff"]["different"] == 1 and summary["diff"]["missing"] == 0
    assert cluster["counts"] == local["counts"] and cluster["diff"] == local["diff"]
    for name in ("directives", "decisions", "deadletter", "diff", "usage", "recommendations"):
        assert dataset(tmp_path / "cluster", name) == dataset(tmp_path / "local", name), name
    assert len(dataset(tmp_path / "cluster", "decisions")) > 1000
