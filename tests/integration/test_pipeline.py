"""The live pipeline on a local Apache Kafka: live equals replay, and a SIGKILLed worker loses nothing.

Scenarios come from `app.audit.synth` (several brokers, principals over their quotas, strict and
legacy mutations, connection bursts), the same input the audit's tests use.

Each test runs real `quota-streams worker` processes (app/devstack/launcher.py) with their own app id
and topics, feeds a generated scenario through the source topics (one partition each, so the
order every window sees is defined), and compares the directives on the control topic with
what `replay` publishes for the same lines.
"""

from __future__ import annotations

import asyncio
import random
import signal
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from app.audit.synth import CONFIGS, T0, scenario, topic_of
from app.engine.engine import EngineSettings
from app.devstack.launcher import LocalCluster, isolated_env
from app.intake.replay import replay
from app.kafka.offsets import end_offsets

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.pipeline_io import (assert_same, config_record_key, read_directives,
                                               wait_committed, wait_one_member)
except ImportError:  # pragma: no cover
    from pipeline_io import (assert_same, config_record_key,  # type: ignore[no-redef]
                             read_directives, wait_committed, wait_one_member)

pytestmark = pytest.mark.integration

PARTITIONS = 4


@pytest.fixture
def cluster_env(tmp_path: Path) -> dict[str, str]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    return {
        **isolated_env(prefix), "QS_PARTITIONS": str(PARTITIONS), "QS_SCOPE": "broker",
        "QS_STATE_DIR": str(tmp_path / "state"), "QS_FLUSH_INTERVAL_MS": "500",
    }


@pytest.fixture
def cluster(kafka_bootstrap: str, cluster_env: dict[str, str], tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    workers = getattr(request, "param", 1)
    local = LocalCluster(workers, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=cluster_env)
    try:
        yield local
    finally:
        local.stop()


async def produce(bootstrap: str, env: dict[str, str], records: list[dict[str, Any] | bytes]) -> None:
    topics = {"request": env["QS_TOPIC_REQUEST"], "connection": env["QS_TOPIC_CONNECTION"],
              "mutation": env["QS_TOPIC_MUTATION"], "quota_config": env["QS_TOPIC_CONFIGS"]}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for record in records:
            if isinstance(record, bytes):  # raw, possibly broken, input for the request topic
                await producer.send(topics["request"], record, partition=0)
            else:
                topic = topic_of(record)
                key = config_record_key(record) if topic == "quota_config" else None
                await producer.send(topics[topic], orjson.dumps(record), key=key, partition=0)
        await producer.flush()
    finally:
        await producer.stop()


def replayed(lines: list[dict[str, Any]]) -> list[bytes]:
    out: list[bytes] = []
    for result in replay((orjson.dumps(line) for line in lines), EngineSettings(scope="broker")):
        assert not result.bad
        out.extend(orjson.dumps(d) for d in result.directives)
    return out


BAD_INPUT: list[bytes] = [
    b"not json",
    orjson.dumps({"type": "request", "v": 2, "ts": T0, "broker": 1, "user": "a", "client_id": "b", "api": "Produce"}),
    orjson.dumps({"type": "batch", "v": 1, "broker": 1, "events": [
        {"type": "request", "v": 1, "ts": T0, "user": "a", "client_id": "b", "api": "Produce", "bytes": -5},
        {"type": "request", "v": 1, "ts": T0 + 10**12, "user": "a", "client_id": "b", "api": "Produce"}]}),
    # ~0.9 MB of noise: its dead letter, as text, would be ~3 MB, past the topic's limit
    random.Random(5).randbytes(900_000),
    # nested 600 deep: too deep to encode again, and to quote in full
    b'{"type": "request", "v": ' + b"[" * 600 + b"]" * 600 + b"}",
]


def test_live_directives_equal_replay(cluster: LocalCluster, cluster_env: dict[str, str]) -> None:
    """Same directives as replay; bad input dead-lettered with its reason, the rest processed."""
    events = scenario(seed=7, start_ms=T0, seconds=12)
    expected = replayed(CONFIGS + events)
    kinds = {orjson.loads(d)["quota"] for d in expected}
    assert len(kinds) >= 4, f"scenario should throttle several quota types, got {kinds}"
    asyncio.run(produce(cluster.start_broker(), cluster_env, CONFIGS))
    cluster.start()
    cluster.wait_ready()
    mixed: list[dict[str, Any] | bytes] = [*events[:50], *BAD_INPUT, *events[50:]]
    asyncio.run(produce(str(cluster.bootstrap), cluster_env, mixed))
    live = asyncio.run(read_directives(str(cluster.bootstrap), cluster_env["QS_TOPIC_DIRECTIVES"],
                                       len(expected), timeout=120))
    assert_same(live, expected)
    dead = [orjson.loads(d) for d in asyncio.run(read_directives(
        str(cluster.bootstrap), cluster_env["QS_TOPIC_DEADLETTER"], 6, timeout=30, partitions=1))]
    reasons = [d["reason"] for d in dead]
    assert len(dead) == 6, reasons
    assert reasons[0].startswith("not JSON") and dead[0]["value"] == "not json"
    assert "unsupported version" in reasons[1]
    assert "bytes must be >= 0" in reasons[2] or "negative" in reasons[2]
    assert "from the stream time" in reasons[3]
    assert reasons[4].startswith("not JSON") and dead[4]["truncated"] is True
    assert dead[4]["value_bytes"] == 900_000 and len(dead[4]["value_sha256"]) == 64
    assert "unsupported version" in reasons[5] and len(reasons[5]) < 200
    assert all(d["source"].startswith(cluster_env["QS_TOPIC_REQUEST"] + "/0@") for d in dead)
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ports[0]}/metrics", timeout=5) as page:
        text = page.read().decode()
    counted = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("quota_streams_deadletter_total{"))
    assert counted == 6
    assert "quota_streams_directives_total{" in text
    # one worker holds every window: each sample went through the engine in the ingest's
    # stage, and nothing crossed the samples topic
    paths = metric_values(text, "quota_streams_samples_path_total")
    assert paths.get('path="one_stage"', 0) >= len(events) and not paths.get('path="rekeyed"')
    assert sum(asyncio.run(samples_topic_ends(str(cluster.bootstrap), cluster_env)).values()) == 0
    for page in ("/table/entity-state/", "/router/", "/graph/", "/stats/"):  # Faust's own, off
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{cluster.ports[0]}{page}", timeout=5)
        assert refused.value.code == 404, page


def metric_values(text: str, name: str) -> dict[str, float]:
    """A metric's samples in a /metrics page, by their labels (`path="one_stage"`)."""
    prefix = name + "{"
    return {line[len(prefix):line.index("}")]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(prefix)}


async def samples_topic_ends(bootstrap: str, env: dict[str, str]) -> dict[int, int]:
    topic = f"{env['QS_APP_ID']}-samples"
    ends = await end_offsets(bootstrap, [(topic, p) for p in range(PARTITIONS)])
    return {p: n for (_, p), n in ends.items()}


@pytest.mark.parametrize("cluster", [2], indirect=True)
def test_sigkilled_worker_loses_no_window(cluster: LocalCluster, cluster_env: dict[str, str]) -> None:
    """Windows built before a SIGKILL keep counting on the survivor: directives equal replay."""
    first = scenario(seed=11, start_ms=T0, seconds=6)
    second = scenario(seed=12, start_ms=T0 + 6000, seconds=6)
    expected = replayed(CONFIGS + first + second)
    expected_first = replayed(CONFIGS + first)
    asyncio.run(produce(cluster.start_broker(), cluster_env, CONFIGS))
    cluster.start()
    cluster.wait_ready()
    asyncio.run(produce(str(cluster.bootstrap), cluster_env, first))
    seen = asyncio.run(read_directives(str(cluster.bootstrap), cluster_env["QS_TOPIC_DIRECTIVES"],
                                       len(expected_first), timeout=120))
    assert_same(seen, expected_first)
    # two workers: the one reading the source partition holds only some windows, and sends
    # the others' samples across the samples topic
    assert sum(asyncio.run(samples_topic_ends(str(cluster.bootstrap), cluster_env)).values()) > 0
    # once every input offset is committed, the killed worker leaves nothing unsaved (at-least-once
    # would otherwise re-apply the uncommitted tail and, rightly, change some windows)
    asyncio.run(wait_committed(str(cluster.bootstrap), cluster_env, timeout=60))
    cluster.kill_worker(0, signal.SIGKILL)
    # input processed while the group rebalances may be applied twice (at-least-once: its offset
    # commit is refused); feeding the rest once the take-over has settled keeps the comparison exact
    cluster.wait_owns(1, PARTITIONS)
    asyncio.run(wait_one_member(str(cluster.bootstrap), cluster_env["QS_APP_ID"], timeout=60))
    asyncio.run(produce(str(cluster.bootstrap), cluster_env, second))
    live = asyncio.run(read_directives(str(cluster.bootstrap), cluster_env["QS_TOPIC_DIRECTIVES"],
                                       len(expected), timeout=150))
    assert_same(live, expected)
