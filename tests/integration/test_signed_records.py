"""Signed directives and configs end to end: with QS_SIGNING_KEYS, `produce` seals configs, the
worker skips a forged config and seals its directives under their keys, and a subscriber refuses
a forged one and a sealed one re-sent under another key."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from app.audit.synth import CONFIGS, T0, scenario
from app.engine.engine import EngineSettings
from app.devstack.launcher import LocalCluster, isolated_env
from app.intake.replay import replay
from app.signing import Signing
from app.subscriber.consumer import DirectiveSubscriber

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.pipeline_io import assert_same, config_record_key, read_records
except ImportError:  # pragma: no cover
    from pipeline_io import assert_same, config_record_key, read_records  # type: ignore[no-redef]

pytestmark = pytest.mark.integration
KEYS = "it1:integration-secret-0123456"


async def send_raw(bootstrap: str, topic: str, value: bytes, key: bytes | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


async def subscriber_counts(bootstrap: str, topic: str) -> dict[str, object]:
    sub = DirectiveSubscriber(bootstrap, None, topic=topic, signing=Signing.parse(KEYS))
    await sub.start()
    try:
        await sub.wait_ready(timeout=30)
        return sub.stats
    finally:
        await sub.stop()


def test_forged_records_are_refused_and_real_ones_sealed(kafka_bootstrap: str,
                                                        tmp_path: Path) -> None:
    prefix = f"s{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SIGNING_KEYS": KEYS,
           "QS_STATE_DIR": str(tmp_path / "state")}
    events = scenario(seed=9, start_ms=T0, seconds=6)
    lines = tmp_path / "input.jsonl"
    lines.write_bytes(b"\n".join(orjson.dumps(r) for r in CONFIGS + events) + b"\n")
    expected = [orjson.dumps(d) for result in replay(lines.read_bytes().splitlines(),
                                                     EngineSettings()) for d in result.directives]
    # a forged config, unsealed and in Kafka before the events, that would lift alice's quotas
    forged_config = {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "alice"},
                     "quotas": {"producer_byte_rate": 10**12, "consumer_byte_rate": 10**12,
                                "request_percentage": 10**6}}
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        cluster.start()
        asyncio.run(send_raw(kafka_bootstrap, env["QS_TOPIC_CONFIGS"], orjson.dumps(forged_config),
                             key=config_record_key(forged_config)))
        proc_env = {**os.environ, **env, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
        subprocess.run([sys.executable, "-m", "app.cli", "produce", str(lines), "--partition",
                        "0", "--quiet"], env=proc_env, check=True, capture_output=True)
        cluster.wait_ready()
        live = asyncio.run(read_records(kafka_bootstrap, env["QS_TOPIC_DIRECTIVES"],
                                        len(expected), timeout=120))
        signing = Signing.parse(KEYS)
        opened = [signing.open(env["QS_TOPIC_DIRECTIVES"], r.key, r.value) for r in live]
        assert all(reason is None for _, reason in opened)
        assert_same([payload for payload, _ in opened if payload is not None], expected)
        forged = dict(orjson.loads(expected[0]), until=2**62)
        asyncio.run(send_raw(kafka_bootstrap, env["QS_TOPIC_DIRECTIVES"], orjson.dumps(forged)))
        # a genuine sealed directive re-sent under another key
        asyncio.run(send_raw(kafka_bootstrap, env["QS_TOPIC_DIRECTIVES"], live[0].value,
                             key=b"producer_byte_rate|{}"))
        stats = asyncio.run(subscriber_counts(kafka_bootstrap, env["QS_TOPIC_DIRECTIVES"]))
        assert stats["bad_reasons"] == {"unsigned": 1, "bad_signature": 1}
        assert stats["records"] == len(live) + 2
    finally:
        cluster.stop()
