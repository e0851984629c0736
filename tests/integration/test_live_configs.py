"""Configs on event time, live: a worker's directives equal `replay`'s and the audit's when quota
configs are written while events stream in, the config follower is slowed on purpose, and the
worker is killed and restarted in the middle.

Events are sent in real time, each once its `ts` has passed (as brokers report usage); config
changes are written at random moments by a second producer with `ts` = the writer's clock, as
`quotas alter` does. Replay gets every config line at the end of its file: configs apply by
`ts`, not by position. The audit reads the same topics, with their record timestamps.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from app.audit.explain import read_kafka
from app.audit.options import Topics
from app.audit.explode import ExplodeContext
from app.audit.in_process import recompute_local
from app.audit.synth import CONFIGS, scenario, topic_of
from app.engine.engine import EngineSettings
from app.devstack.launcher import LocalCluster, isolated_env
from app.intake.replay import replay
from app.kafka.security import PLAINTEXT
from app.signing import Signing

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.pipeline_io import (assert_same, config_record_key, read_directives,
                                               wait_committed)
except ImportError:  # pragma: no cover
    from pipeline_io import (assert_same, config_record_key,  # type: ignore[no-redef]
                             read_directives, wait_committed)

pytestmark = pytest.mark.integration

#: Configs reach Kafka within half the grace of their `ts` (else they are late: in force from
#: their arrival, the config topic's append time). Writes on a busy two-core box can take tens
#: of ms, so the grace here is wider than the default's 20 ms, in every driver alike.
GRACE_MS = 400
SETTINGS = EngineSettings(scope="broker", config_grace_ms=GRACE_MS)
SLOW_FOLLOWER = Path(__file__).parent / "slow_follower"
FOLLOWER_DELAY_MS = 800


def now_ms() -> int:
    return int(time.time() * 1000)


def shifted(record: dict[str, Any], base: int) -> dict[str, Any]:
    """A scenario record (relative times) moved to start at `base`."""
    if record["type"] == "batch":
        return {**record, "events": [{**e, "ts": e["ts"] + base} for e in record["events"]]}
    return {**record, "ts": record["ts"] + base}


def due(record: dict[str, Any]) -> int:
    """When a broker could report it: once its last event happened."""
    return max(e["ts"] for e in record.get("events", [record]))


def quota_change(rng: random.Random, ts: int) -> dict[str, Any]:
    """A new value for one of the users' quotas, which the scenario's greedy users exceed all
    the time (between a third and three times the scenario's value)."""
    base = CONFIGS[0]
    quota, value = rng.choice(sorted(base["quotas"].items()))
    new = max(1, round(value * rng.uniform(0.3, 3.0)))
    return {**base, "ts": ts, "quotas": {quota: new}}


class Writer:
    """Events and configs sent concurrently, as the brokers and an operator would."""

    def __init__(self, bootstrap: str, env: dict[str, str]) -> None:
        self.bootstrap = bootstrap
        self.topics = {"request": env["QS_TOPIC_REQUEST"], "connection": env["QS_TOPIC_CONNECTION"],
                       "mutation": env["QS_TOPIC_MUTATION"], "quota_config": env["QS_TOPIC_CONFIGS"]}
        self.events: list[dict[str, Any]] = []
        self.configs: list[dict[str, Any]] = []

    async def configs_now(self, records: list[dict[str, Any]]) -> None:
        """Each stamped with the time it is sent, as `quotas alter` does."""
        async with self._producer() as p:
            for record in records:
                record = {**record, "ts": now_ms()}
                await p.send_and_wait(self.topics["quota_config"], orjson.dumps(record),
                                      key=config_record_key(record), partition=0)
                self.configs.append(record)

    async def run(self, rng: random.Random, seed: int, seconds: int, changes: int) -> None:
        """`seconds` of scenario events from now on, and `changes` config writes among them."""
        base = now_ms() + 200
        records = [shifted(r, base) for r in scenario(seed=seed, start_ms=0, seconds=seconds)]
        moments = sorted(base + rng.randrange(seconds * 1000) for _ in range(changes))
        await asyncio.gather(self._events(records, rng), self._changes(moments, rng))

    async def _events(self, records: list[dict[str, Any]], rng: random.Random) -> None:
        async with self._producer() as p:
            for record in records:
                await _sleep_until(due(record) + rng.randrange(40))
                await p.send(self.topics[topic_of(record)], orjson.dumps(record), partition=0)
                self.events.append(record)
            await p.flush()

    async def _changes(self, moments: list[int], rng: random.Random) -> None:
        async with self._producer() as p:
            for moment in moments:
                await _sleep_until(moment)
                record = quota_change(rng, now_ms())  # stamped by the writer's clock
                await p.send_and_wait(self.topics["quota_config"], orjson.dumps(record),
                                      key=config_record_key(record), partition=0)
                self.configs.append(record)

    def _producer(self) -> Any:
        return _Producer(self.bootstrap)


class _Producer:
    def __init__(self, bootstrap: str) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, acks="all")

    async def __aenter__(self) -> AIOKafkaProducer:
        await self.producer.start()
        return self.producer

    async def __aexit__(self, *exc: Any) -> None:
        await self.producer.stop()


async def _sleep_until(wall_ms: int) -> None:
    delay = (wall_ms - now_ms()) / 1000
    if delay > 0:
        await asyncio.sleep(delay)


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


@pytest.mark.parametrize("seed", [21, 22])
def test_configs_written_while_events_stream_apply_at_their_ts_in_every_driver(
        kafka_bootstrap: str, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    prefix = f"ct{seed}{os.urandom(3).hex()}"
    env = {
        **isolated_env(prefix), "QS_PARTITIONS": "4", "QS_SCOPE": "broker",
        "QS_STATE_DIR": str(tmp_path / "state"), "QS_FLUSH_INTERVAL_MS": "500",
        "QS_CONFIG_HOLD_MAX_MS": "10000",  # a busy machine must not release events early
        "QS_CONFIG_GRACE_MS": str(GRACE_MS),
        "QS_TEST_FOLLOWER_DELAY_MS": str(FOLLOWER_DELAY_MS),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SLOW_FOLLOWER),
                                                    os.environ.get("PYTHONPATH")])),
    }
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=env)
    try:
        bootstrap = cluster.start_broker()
        writer = Writer(bootstrap, env)
        asyncio.run(writer.configs_now(CONFIGS))
        cluster.start()
        cluster.wait_ready()
        asyncio.run(writer.run(rng, seed, seconds=4, changes=5))
        asyncio.run(wait_committed(bootstrap, env, timeout=90))
        held = metric(cluster.ports[0], "quota_streams_config_held_records_total")
        cluster.kill_worker(0, signal.SIGKILL)
        # written while no worker runs, then while the new one starts and joins the group
        asyncio.run(writer.run(rng, seed + 100, seconds=2, changes=2))
        cluster.start_worker(0)
        asyncio.run(writer.run(rng, seed + 200, seconds=3, changes=4))
        cluster.wait_ready()
        lines = [orjson.dumps(r) for r in writer.events + writer.configs]  # configs last
        expected = [orjson.dumps(d) for result in replay(lines, SETTINGS) for d in result.directives]
        assert len({orjson.loads(d)["quota"] for d in expected}) >= 3
        live = asyncio.run(read_directives(bootstrap, env["QS_TOPIC_DIRECTIVES"], len(expected),
                                           timeout=150))
        assert_same(live, expected)

        topics = Topics(env["QS_TOPIC_REQUEST"], env["QS_TOPIC_CONNECTION"],
                        env["QS_TOPIC_MUTATION"], env["QS_TOPIC_CONFIGS"],
                        env["QS_TOPIC_DIRECTIVES"])
        mode, streams, records, configs = read_kafka(bootstrap, topics, PLAINTEXT, Signing())
        assert len(configs) == len(writer.configs) and all(at is not None for _, at in configs)
        audited = recompute_local(records, ExplodeContext(SETTINGS, mode, tuple(configs), streams))
        assert_same(audited.directives(), expected)

        assert held > 0, "the slowed follower should have held events"
        assert metric(cluster.ports[0], "quota_streams_config_missed_total") == 0
        # a config is late when its write took over half the grace (a busy machine, a leader
        # moving): the restarted worker read the whole topic, and counts each such one once
        late = sum(1 for update, at in configs if at is not None and at - GRACE_MS // 2 > update.ts)
        assert metric(cluster.ports[0], "quota_streams_config_late_total") == late
    finally:
        cluster.stop()
