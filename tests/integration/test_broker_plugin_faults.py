"""The broker plugin through faults, on a real broker: a control record over the size bound, the
control topic deleted and recreated with more partitions, and the broker restarted. Each is
refused or recovered from and counted, and the broker serves its clients throughout; how long a
restarted broker serves before the plugin has its allocations back is measured.

The plugin's counters are read as Prometheus scrapes them in production: the JMX exporter runs
in the broker with the rules of deploy/broker-plugin/metrics/jmx-exporter.yaml, so these tests
hold those rules to the beans the plugin registers too.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from app.contract.directives import MAX_RECORD_BYTES
from app.devstack.broker_plugin import plugin_cluster
from app.devstack.kafka import KafkaCluster, broker_count
from app.devstack.launcher import isolated_env
from app.kafka.topics import create_topics
from app.kafka.whole_topic import read_topic
from tests.integration.measured import measured
from tests.integration.plugin_control import allocation, scrape, send

pytestmark = pytest.mark.integration

#: s a restarted broker may serve before its allocations are back: 0.87, 1.45 and 1.77 s in
#: three runs beside a CI run (bench/RESULTS.md)
REBUILT_WITHIN_S = (0.0, 10.0)
RULES = Path(__file__).resolve().parents[2] / "deploy" / "broker-plugin" / "metrics" / \
    "jmx-exporter.yaml"


@dataclass
class Stack:
    kafka: KafkaCluster
    env: dict[str, str]
    bootstrap: str

    @property
    def control(self) -> str:
        return self.env["QS_TOPIC_DIRECTIVES"]

    def scrape(self) -> dict[str, float]:
        """The plugin's series on the broker's exporter."""
        return scrape(self.kafka.nodes[0].metrics_url)

    def control_count(self, outcome: str) -> float:
        series = f'quota_streams_plugin_records_total{{follower="control",outcome="{outcome}"}}'
        return self.scrape().get(series, 0.0)

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s " \
                f"({self.scrape()})"
            time.sleep(0.3)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = isolated_env(f"bpf{uuid.uuid4().hex[:8]}")
    kafka = plugin_cluster(env, tmp_path_factory.mktemp("bpf-kafka"), brokers=1,
                           metrics_rules=RULES).start()
    bootstrap = kafka.bootstrap()
    try:
        asyncio.run(create_topics(bootstrap, [(env["QS_TOPIC_DIRECTIVES"], 1, {}),
                                              (env["QS_TOPIC_REQUEST"], 1, {}),
                                              (env["QS_TOPIC_CONFIGS"], 1, {}),
                                              (f"{env['QS_APP_ID']}.data", 1, {})]))
        yield Stack(kafka, env, bootstrap)
    finally:
        kafka.stop(graceful=False)  # throwaway: its data goes with it


@dataclass
class Pinger:
    """Produces to the data topic every 50 ms on its own thread, timing each acknowledgement:
    whether the broker served its clients while the control topic was in trouble."""

    bootstrap: str
    topic: str
    acked: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Pinger:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, request_timeout_ms=5000)
        await producer.start()
        try:
            while not self._stop.is_set():
                try:
                    await producer.send_and_wait(self.topic, b"ping", partition=0)
                    self.acked.append(time.monotonic())
                except Exception as exc:  # counted: the test says how many failed
                    self.failed.append(repr(exc))
                await asyncio.sleep(0.05)
        finally:
            await producer.stop()

    def longest_gap_s(self) -> float:
        return max((b - a for a, b in zip(self.acked, self.acked[1:])), default=float("inf"))


def test_the_static_split_counts_brokers_not_their_listeners(stack: Stack) -> None:
    """KRaft hands the callback each broker once per listener (PLAINTEXT and INTERNAL here):
    one broker, so a quota's static split is all of it, not half."""
    stack.wait_for("the brokers counted", lambda: "quota_streams_plugin_brokers" in stack.scrape())
    assert stack.scrape()["quota_streams_plugin_brokers"] == 1


def test_a_control_record_over_the_size_bound_is_refused_unread_and_counted(stack: Stack) -> None:
    """A valid allocation padded past 256 KiB is refused for its size alone; the one after it is
    taken, and the broker serves throughout."""
    padded = allocation("padded", 1000.0)[:-1] + b',"pad":"' + b"x" * MAX_RECORD_BYTES + b'"}'
    data = f"{stack.env['QS_APP_ID']}.data"
    with Pinger(stack.bootstrap, data) as pinger:
        asyncio.run(send(stack.bootstrap, stack.control,
                         [(0, padded), (0, allocation("loader", 600_000.0))]))
        stack.wait_for("the allocation after the padded record taken",
                       lambda: stack.control_count("added") >= 1)
        time.sleep(1.0)
    assert stack.control_count("bad.too_large") == 1
    assert stack.scrape()["quota_streams_plugin_allocations_in_force"] >= 1
    assert not pinger.failed and pinger.longest_gap_s() < 2.0, (pinger.failed,
                                                                 pinger.longest_gap_s())


def test_the_control_topic_deleted_and_recreated_is_read_again_from_its_start(
        stack: Stack) -> None:
    """Deleted, the topic's allocations hold (then their static split) and the broker serves;
    recreated with two partitions, what either partition gets is taken."""
    data = f"{stack.env['QS_APP_ID']}.data"
    added = stack.control_count("added")
    with Pinger(stack.bootstrap, data) as pinger:
        asyncio.run(delete_topic(stack.bootstrap, stack.control))
        time.sleep(5.0)  # the follower meets the missing topic
        asyncio.run(create_topics(stack.bootstrap, [(stack.control, 2, {})]))
        asyncio.run(send(stack.bootstrap, stack.control,
                         [(0, allocation("recreated-0", 500_000.0)),
                          (1, allocation("recreated-1", 400_000.0))]))
        stack.wait_for("both partitions of the recreated topic read",
                       lambda: stack.control_count("added") >= added + 2)
    assert stack.scrape()["quota_streams_plugin_allocations_held"] >= 3
    assert not pinger.failed and pinger.longest_gap_s() < 2.0, (pinger.failed,
                                                                 pinger.longest_gap_s())


async def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()


def test_a_restarted_broker_has_its_allocations_back_within_seconds_of_serving(
        stack: Stack) -> None:
    """Restarted, the broker answers clients as soon as it is up, and the plugin reads the
    control and config topics through it: until then it holds Kafka's own quota configs only.
    That time, from its first answer to every allocation in force again, is measured."""
    added = stack.control_count("added")
    asyncio.run(send(stack.bootstrap, stack.control, [(0, allocation("restarted", 300_000.0))]))
    stack.wait_for("the allocation taken", lambda: stack.control_count("added") > added)
    # what the topic holds, valid for a while yet: what the restarted plugin must have back
    records = asyncio.run(read_topic(stack.bootstrap, stack.control))
    held = {orjson.loads(r.value)["entity"]["client_id"] for r in records
            if r.value and orjson.loads(r.value)["valid_until"] / 1000 > time.time() + 30}
    assert "restarted" in held
    node = stack.kafka.nodes[0]
    started = time.monotonic()
    stack.kafka.restart(0)
    served = rebuilt = None
    while (served is None or rebuilt is None) and time.monotonic() - started < 90:
        now = time.monotonic() - started
        if served is None and broker_count("127.0.0.1", node.ports["PLAINTEXT"]) == 1:
            served = now
        if rebuilt is None and in_force(stack) >= len(held):
            rebuilt = now
        time.sleep(0.05)
    assert served is not None and rebuilt is not None, (served, rebuilt)
    gap = measured("restarted broker: served before its allocations were back, s",
                   rebuilt - served, REBUILT_WITHIN_S)
    assert REBUILT_WITHIN_S[0] <= gap <= REBUILT_WITHIN_S[1], (served, rebuilt)


def in_force(stack: Stack) -> float:
    """The allocations in force, or 0 while the exporter does not answer (the JVM starting)."""
    try:
        return stack.scrape().get("quota_streams_plugin_allocations_in_force", 0.0)
    except OSError:
        return 0.0
