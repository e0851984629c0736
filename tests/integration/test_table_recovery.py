"""A Faust RocksDB table survives worker restarts, stopped or killed, kept or wiped.

Each scenario runs `_recovery_app.py` as a real worker subprocess: worker 1 applies a few
thousand writes (each key written twice, so values matter), is stopped (SIGTERM) or killed
(SIGKILL) once the table, its changelog and the source offsets are all complete; worker 2
restarts on the same RocksDB dir, worker 3 on an empty one. The first table dump each
restarted worker makes (agents only run after recovery) must equal the table before the
restart. Source offsets are committed before the stop, so nothing is re-processed and the dump
shows what recovery alone restored.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from app.kafka.topics import create_topics
from app.kafka.offsets import end_offsets

pytestmark = pytest.mark.integration

APP_PATH = Path(__file__).with_name("_recovery_app.py")
PARTITIONS = 2
KEYS = 2500
ROUNDS = 2  # every key written ROUNDS times: KEYS * ROUNDS changelog records


@dataclass
class Scenario:
    """One isolated app: its own consumer group, topics, changelog and data dir."""

    bootstrap: str
    tmp: Path
    app_id: str = field(default_factory=lambda: f"rt-{uuid.uuid4().hex[:8]}")
    dumps: int = 0

    @property
    def writes_topic(self) -> str:
        return f"{self.app_id}-writes"

    @property
    def control_topic(self) -> str:
        return f"{self.app_id}-control"

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-kv-changelog"

    @property
    def datadir(self) -> Path:
        return self.tmp / "data"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "RA_BOOTSTRAP": self.bootstrap,
            "RA_APP_ID": self.app_id,
            "RA_DATADIR": str(self.datadir),
            "RA_PARTITIONS": str(PARTITIONS),
            "RA_WRITES_TOPIC": self.writes_topic,
            "RA_CONTROL_TOPIC": self.control_topic,
            "PYTHONUNBUFFERED": "1",
        }


_RUNNING: list[Worker] = []


@pytest.fixture(autouse=True)
def _reap_workers() -> Iterator[None]:
    """A failed assertion must not leave worker processes running (and in the group)."""
    yield
    while _RUNNING:
        worker = _RUNNING.pop()
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()


class Worker:
    """A `_recovery_app.py worker` subprocess with its log in the test's tmp dir."""

    def __init__(self, scenario: Scenario, name: str) -> None:
        self.log_path = scenario.tmp / f"{name}.log"
        self._log: IO[bytes] = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(APP_PATH), "worker", "-l", "info", "--without-web"],
            env=scenario.env(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=scenario.tmp,
        )
        _RUNNING.append(self)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"worker ignored {sig.name} for {timeout} s; log {self.log_path}")
        self._log.close()


async def _produce_writes(scenario: Scenario) -> dict[str, int]:
    """KEYS keys, ROUNDS rounds; returns the expected final table."""
    producer = AIOKafkaProducer(
        bootstrap_servers=scenario.bootstrap, linger_ms=5, max_batch_size=256 * 1024
    )
    await producer.start()
    expected: dict[str, int] = {}
    try:
        futures = []
        for rnd in range(ROUNDS):
            for k in range(KEYS):
                key, value = f"key-{k:05d}", rnd * 1_000_000 + k
                expected[key] = value
                futures.append(
                    await producer.send(
                        scenario.writes_topic,
                        json.dumps(value).encode(),
                        key=json.dumps(key).encode(),
                    )
                )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return expected


def _request_dump(scenario: Scenario) -> Path:
    scenario.dumps += 1
    path = scenario.tmp / f"dump-{scenario.dumps}.json"

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=scenario.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(
                scenario.control_topic, json.dumps(str(path)).encode(), key=b'"dump"'
            )
        finally:
            await producer.stop()

    asyncio.run(send())
    return path


def _wait_dump(worker: Worker, path: Path, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if worker.proc.poll() is not None:
            pytest.fail(f"worker exited with {worker.proc.returncode}:\n{worker.log()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no table dump within {timeout} s:\n{worker.log()[-3000:]}")
        time.sleep(0.05)  # a poll: the dump is written by the worker's own process
    return json.loads(path.read_text())


def _first_dump(scenario: Scenario, worker: Worker, timeout: float = 45.0) -> dict[str, int]:
    """The table as the worker sees it when its agents first run (i.e. right after recovery)."""
    return _wait_dump(worker, _request_dump(scenario), timeout)


def _wait_until_settled(
    scenario: Scenario, worker: Worker, expected: dict[str, int], timeout: float = 45.0
) -> None:
    """Table complete, every changelog record on the broker, source offsets committed."""
    deadline = time.monotonic() + timeout
    total_writes = len(expected) * ROUNDS
    while True:
        if _wait_dump(worker, _request_dump(scenario), timeout) == expected:
            break
        if time.monotonic() > deadline:
            pytest.fail("worker 1 never applied every write")
        time.sleep(0.2)  # a poll: the worker process applies the writes at its own pace

    async def flushed_and_committed() -> bool:
        changelog = [TopicPartition(scenario.changelog_topic, p) for p in range(PARTITIONS)]
        writes = [TopicPartition(scenario.writes_topic, p) for p in range(PARTITIONS)]
        ends = await end_offsets(scenario.bootstrap, changelog + writes)
        if sum(ends[tp] for tp in changelog) < total_writes:
            return False
        group = AIOKafkaConsumer(bootstrap_servers=scenario.bootstrap, group_id=scenario.app_id)
        await group.start()
        try:
            return all([await group.committed(tp) == ends[tp] for tp in writes])
        finally:
            await group.stop()

    while not asyncio.run(flushed_and_committed()):
        if time.monotonic() > deadline:
            pytest.fail("changelog not flushed or source offsets not committed in time")
        time.sleep(0.2)  # a poll: the worker process flushes and commits on its own timers


def _setup(scenario: Scenario) -> dict[str, int]:
    asyncio.run(
        create_topics(
            scenario.bootstrap,
            [(scenario.writes_topic, PARTITIONS, {}), (scenario.control_topic, 1, {})],
        )
    )
    return asyncio.run(_produce_writes(scenario))


def _worker_with_table(scenario: Scenario, expected: dict[str, int]) -> Worker:
    worker = Worker(scenario, "worker1")
    _wait_until_settled(scenario, worker, expected)
    return worker


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "kill9"])
def test_table_restored_after_restart(
    kafka_bootstrap: str, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    scenario = Scenario(kafka_bootstrap, tmp_path)
    expected = _setup(scenario)
    worker = _worker_with_table(scenario, expected)
    before = _first_dump(scenario, worker)
    assert before == expected and len(before) == KEYS
    worker.stop(stop_signal)

    timings: dict[str, float] = {}
    for name, keep_rocksdb in (("kept", True), ("wiped", False)):
        if not keep_rocksdb:
            shutil.rmtree(scenario.datadir)
        restarted = Worker(scenario, f"worker-{name}")
        after = _first_dump(scenario, restarted)
        timings[name] = time.monotonic() - restarted.started_at
        log = restarted.log()
        restarted.stop(stop_signal)
        assert "ConsistencyError" not in log
        missing = sorted(set(before) - set(after))[:5]
        assert len(after) == len(before), f"{name}: lost {len(before) - len(after)} keys {missing}"
        assert after == before, f"{name}: restored values differ"
    print(f"\nrestart-to-first-dump ({stop_signal.name}, {KEYS * ROUNDS} changelog records):",
          ", ".join(f"{k} RocksDB {v:.1f} s" for k, v in timings.items()))
