"""The broker plugin on a three-broker Apache Kafka: a cluster-wide quota held by the brokers
themselves, no gateway.

The module's cluster loads jvm/broker-plugin's jar (`make setup` builds it): its quota callback
follows the control topic and its metrics reporter writes each broker's usage to the request
topic. One worker in cluster scope with allocations divides the client id `loader`'s
producer_byte_rate among the brokers. Two confluent-kafka producers offer twice the quota
straight to the brokers, over partitions led by all three; Kafka throttles them itself.

The brokers' windows are 2 x 1 s and Kafka's byte-rate throttle is unbounded, so a broker mutes
its client for up to a couple of seconds at a time; the workers measure each broker's usage over
QS_ALLOCATION_SPAN_MS = 4 s, which covers those mutes (docs/broker-plugin.md). Until the first
allocation, a span after the first usage, the brokers know no quota for `loader`: the warm-up.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import AdminClient

from app.admin.config_topic import write_records
from app.admin.entities import canonical_record
from app.clients.runner import run_clients, summed
from app.devstack.kafka import ROOT, KafkaCluster
from app.devstack.launcher import LocalCluster, isolated_env
from app.engine.allocation import LEND
from app.engine.configs import parse_config_record
from app.kafka.topics import create_topics_sync
from app.kafka.whole_topic import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLUGIN_JAR = ROOT / "jvm" / "broker-plugin" / "target" / "quota-streams-broker-plugin.jar"
QUOTA = 600_000  # bytes/s: client id loader's producer_byte_rate, over the whole cluster
WARM_S, MEASURE_S, LEAD_S = 6, 16, 2.0


@dataclass
class Run:
    rates: list[float]  # bytes/s acknowledged to both producers, per second
    leaders: set[int]
    allocations: list[dict[str, Any]]
    usage: list[dict[str, Any]]  # the brokers' request events for loader
    dead: list[dict[str, Any]]  # dead letters of the brokers' records


def plugin_cluster(env: dict[str, str], work_dir: Path) -> KafkaCluster:
    """Three brokers with the plugin, reading and writing this stack's topics."""
    return KafkaCluster(brokers=3, work_dir=work_dir, classpath=(PLUGIN_JAR,), broker_config={
        "client.quota.callback.class": "io.quotastreams.broker.QuotaCallback",
        "metric.reporters": "io.quotastreams.broker.UsageReporter",
        "quota.streams.control.topic": env["QS_TOPIC_DIRECTIVES"],
        "quota.streams.request.topic": env["QS_TOPIC_REQUEST"],
        "quota.streams.brokers": "3",
        # a 2 s window: a fresh window admits one second of the limit at once, not ten
        "quota.window.num": "2",
    })


def partition_leaders(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0
                      ) -> set[int]:
    """The brokers leading the new topic's partitions, once its metadata lists them all with a
    leader (a topic just created may not be in the metadata a broker answers with yet)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        found = admin.list_topics(topic, timeout=10).topics[topic].partitions
        leaders = {p.leader for p in found.values()}
        if (len(found) == partitions and -1 not in leaders) or time.monotonic() > deadline:
            return leaders
        time.sleep(0.2)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    prefix = f"bp{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "cluster",
           "QS_CLUSTER_ENFORCEMENT": "allocations", "QS_ALLOCATION_SPAN_MS": "4000"}
    kafka = plugin_cluster(env, tmp_path_factory.mktemp("bp-kafka")).start()
    plain = kafka.bootstrap()
    workers = LocalCluster(1, bootstrap=plain, work_dir=tmp_path_factory.mktemp("bp"), env=env)
    try:
        workers.start()
        update = parse_config_record({
            "type": "quota_config", "v": 1, "ts": int(time.time() * 1000),
            "entity": {"client_id": "loader"}, "quotas": {"producer_byte_rate": QUOTA}})
        asyncio.run(write_records(plain, env["QS_TOPIC_CONFIGS"],
                                  [(canonical_record(update), update)], None))
        topic = f"{prefix}-data"
        create_topics_sync(plain, [(topic, 3, {})])
        leaders = partition_leaders(plain, topic, 3)
        workers.wait_ready(timeout=60)
        epoch = time.time() + LEAD_S
        out = run_clients([(f"loader-{i}", [
            "--epoch", str(epoch), "--seconds", str(WARM_S + MEASURE_S), "produce",
            "--library", "confluent-kafka", "--bootstrap", plain, "--topic", topic,
            "--client-id", "loader", "--rate", str(QUOTA)]) for i in (1, 2)],
            timeout=WARM_S + MEASURE_S + LEAD_S + 60)
        control = asyncio.run(read_topic(plain, env["QS_TOPIC_DIRECTIVES"]))
        requests = asyncio.run(read_topic(plain, env["QS_TOPIC_REQUEST"]))
        dead = asyncio.run(read_topic(plain, env["QS_TOPIC_DEADLETTER"]))
    finally:
        workers.stop()
        kafka.stop(graceful=False)  # throwaway: its data goes with it
    records = [orjson.loads(r.value) for r in control if r.value]
    usage = [e for r in requests for e in orjson.loads(r.value).get("events", [])
             if e.get("client_id") == "loader"]
    yield Run(summed(list(out.values()), 0, WARM_S + MEASURE_S), leaders,
              [r for r in records if r.get("kind") == "allocation"], usage,
              [orjson.loads(r.value) for r in dead if (r.key or b"").startswith(b"broker/")])


def test_the_brokers_hold_the_cluster_wide_quota_between_them(run: Run) -> None:
    assert run.leaders == {1, 2, 3}
    rates = run.rates[WARM_S:]
    mean = sum(rates) / len(rates)
    assert 0.9 * QUOTA <= mean <= 1.1 * QUOTA, (round(mean / QUOTA, 3),
                                               [round(r / QUOTA, 2) for r in run.rates])


def test_each_broker_is_allocated_its_part(run: Run) -> None:
    assert run.allocations, "no allocation was published"
    last = run.allocations[-1]
    assert last["quota"] == "producer_byte_rate"
    assert last["entity"] == {"user": "", "client_id": "loader"}
    limits = {e["enforcer"]: e["limit"] for e in last["enforcers"]}
    assert set(limits) == {1, 2, 3}
    # the quota, plus at most what the unsaturated brokers lend the saturated (allocation.LEND)
    assert QUOTA * 0.999 <= sum(limits.values()) <= QUOTA * (1 + LEND) * 1.001


def test_the_brokers_report_usage_pre_aggregated(run: Run) -> None:
    assert not run.dead, run.dead[:3]
    assert {e["broker"] for e in run.usage} == {1, 2, 3}
    assert all(e["type"] == "request" and e["api"] == "Produce" and e["bytes"] > 0
               for e in run.usage)
    # one event per broker, client and second: several requests each
    assert sum(e["count"] > 1 for e in run.usage) >= 0.9 * len(run.usage)
    seconds = {(e["broker"], e["ts"]) for e in run.usage}
    assert all(ts % 1000 == 0 for _, ts in seconds)
