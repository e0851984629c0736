"""Cluster-scope allocations with real clients through two named gateways on a local Apache Kafka.

One worker in cluster scope with `QS_CLUSTER_ENFORCEMENT=allocations`; two gateways
(`--gateway-id 1` and `2`, `--gateways 2`) in front of the same broker, so the broker alone
cannot tell their traffic apart: the gateways are the enforcers. A confluent-kafka producer
offers 1.5x the user's quota through each gateway (3x in all); the worker is killed part way.
bench/bench_gateway_allocations.py measures the same with three gateways and moving traffic.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import orjson
import pytest

from app.admin.config_topic import write_records
from app.admin.entities import canonical_record
from app.clients.runner import run_clients, summed
from app.engine.configs import parse_config_record
from app.kafka.whole_topic import read_topic
from app.devstack.launcher import LocalCluster, isolated_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUOTA = 400_000  # bytes/s: the producer_byte_rate of user ANONYMOUS (clients without SASL)
RUN_S, KILL_S, LEAD_S = 40, 22, 6.0
VALIDITY_S = 5  # QS_ALLOCATION_VALIDITY_MS's default: the last allocation holds this long


@dataclass
class Run:
    user: list[float]  # the user's bytes/s acknowledged to both producers, per second
    allocations: list[dict[str, Any]]
    each: list[list[float]]  # each producer's acknowledged bytes/s, per second

    def seconds(self, first: int, last: int) -> str:
        """Each producer's rate as a multiple of the quota in [first, last), for a failure."""
        return "; ".join(f"gateway {i}: {[round(r / QUOTA, 2) for r in rates[first:last]]}"
                         for i, rates in enumerate(self.each, 1))


@pytest.fixture(scope="module")
def run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    prefix = f"ga{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "cluster",
           "QS_CLUSTER_ENFORCEMENT": "allocations"}
    cluster = LocalCluster(1, bootstrap=kafka_bootstrap, work_dir=tmp_path_factory.mktemp("ga"),
                           env=env)
    try:
        cluster.start()
        update = parse_config_record({"type": "quota_config", "v": 1, "ts": int(time.time() * 1000),
                                      "entity": {"user": "ANONYMOUS"},
                                      "quotas": {"producer_byte_rate": QUOTA}})
        asyncio.run(write_records(kafka_bootstrap, env["QS_TOPIC_CONFIGS"],
                                  [(canonical_record(update), update)], None))
        cluster.wait_ready(timeout=120)
        gateways = [cluster.start_gateway("--gateway-id", str(i), "--gateways", "2") for i in (1, 2)]
        topic = f"{prefix}-data"
        from app.kafka.topics import create_topics_sync

        create_topics_sync(kafka_bootstrap, [(topic, 2, {})])
        epoch = time.time() + LEAD_S
        killer = threading.Timer(epoch + KILL_S - time.time(), cluster.kill_worker, (0,))
        killer.start()
        out = run_clients([(f"loader-{i}", [
            "--epoch", str(epoch), "--seconds", str(RUN_S), "produce", "--library",
            "confluent-kafka", "--bootstrap", g.bootstrap, "--topic", topic, "--client-id",
            "loader", "--rate", str(1.5 * QUOTA)]) for i, g in enumerate(gateways, 1)],
            timeout=RUN_S + LEAD_S + 60)
        killer.join()
        control = asyncio.run(read_topic(kafka_bootstrap, env["QS_TOPIC_DIRECTIVES"]))
        records = [orjson.loads(r.value) for r in control if r.value]
        yield Run(summed(list(out.values()), 0, RUN_S),
                  [r for r in records if r.get("kind") == "allocation"],
                  [summed([lines], 0, RUN_S) for lines in out.values()])
    finally:
        cluster.stop()


def test_the_gateways_not_the_broker_behind_them_are_allocated_the_quota(run: Run) -> None:
    assert run.allocations, "no allocation was published"
    named = [{e["enforcer"]: e["limit"] for e in a["enforcers"]} for a in run.allocations]
    assert set().union(*named) == {1, 2}, named[-5:]
    both = [limits for limits in named if set(limits) == {1, 2}]
    assert len(both) >= len(named) / 2, named[-5:]  # a gateway is left out only while idle
    assert all(sum(limits.values()) == pytest.approx(QUOTA) for limits in both)
    assert all(a["quota"] == "producer_byte_rate" and a["entity"] == {"user": "ANONYMOUS",
                                                                      "client_id": ""}
               for a in run.allocations)


def test_two_gateways_hold_the_quota_between_them(run: Run) -> None:
    rates = run.user[8:KILL_S]
    mean = sum(rates) / len(rates)
    assert 0.85 * QUOTA <= mean <= 1.15 * QUOTA, run.seconds(8, KILL_S)


def test_with_the_worker_dead_each_gateway_holds_its_static_split(run: Run) -> None:
    # the last allocation holds for its validity, then quota / 2 on each gateway: still the quota
    rates = run.user[KILL_S + VALIDITY_S + 2:RUN_S]
    mean = sum(rates) / len(rates)
    assert 0.7 * QUOTA <= mean <= 1.15 * QUOTA, [round(r / QUOTA, 2) for r in run.user]

