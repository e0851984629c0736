"""Cluster-scope allocations with real clients through two named gateways on a local Apache Kafka.

One worker in cluster scope with `QS_CLUSTER_ENFORCEMENT=allocations`; two gateways
(`--gateway-id 1` and `2`, `--gateways 2`) in front of the same broker, so the broker alone
cannot tell their traffic apart: the gateways are the enforcers. A confluent-kafka producer
offers 1.5x the user's quota through each gateway (3x in all); the worker is killed part way.
bench/bench_gateway_allocations.py measures the same with three gateways and moving traffic.

The bounds, and what they were set from: `python bench/bench_closed_loop.py
tests/integration/test_gateway_allocations.py` on the 2-core box with one core spinning, 8 runs
(bench/RESULTS.md): both gateways together 0.968-0.985x of the quota (median 0.970x) while the
worker lives; with it dead each gateway 0.964-0.973x of its static split, both 0.968-0.972x; the
last allocation's ts 1.8-2.1 s before the kill (its span and the loop's lag); the listed limits
1.000x the quota at most in 3 runs, and once in 5 more an unsaturated gateway lent its share.
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
from app.engine.allocation import LEND
from app.engine.configs import parse_config_record
from app.kafka.whole_topic import read_topic
from app.devstack.launcher import LocalCluster, isolated_env
from tests.integration.measured import measured

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUOTA = 400_000  # bytes/s: the producer_byte_rate of user ANONYMOUS (clients without SASL)
RUN_S, KILL_S, LEAD_S = 40, 22, 6.0
VALIDITY_S = 5  # QS_ALLOCATION_VALIDITY_MS's default: the last allocation holds this long
#: x QUOTA (the module's docstring): both gateways while the worker lives; each gateway's
#: static split and both together with the worker dead
BOTH, SPLIT = (0.85, 1.15), (0.7, 1.15)
#: seconds between the last allocation's ts (event time) and the kill: its span (1 s) and the
#: loop's lag behind the clients; past the validity the gateways would have split already
LAST_ALLOCATION_S = (0.0, VALIDITY_S)


@dataclass
class Run:
    user: list[float]  # the user's bytes/s acknowledged to both producers, per second
    allocations: list[dict[str, Any]]
    each: list[list[float]]  # each producer's acknowledged bytes/s, per second
    killed_ms: int  # when the worker was killed (wall clock)

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
        killed: list[int] = []

        def kill() -> None:
            cluster.kill_worker(0)
            killed.append(int(time.time() * 1000))

        killer = threading.Timer(epoch + KILL_S - time.time(), kill)
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
                  [summed([lines], 0, RUN_S) for lines in out.values()], killed[0])
    finally:
        cluster.stop()


def test_the_gateways_not_the_broker_behind_them_are_allocated_the_quota(run: Run) -> None:
    assert run.allocations, "no allocation was published"
    named = [{e["enforcer"]: e["limit"] for e in a["enforcers"]} for a in run.allocations]
    assert set().union(*named) == {1, 2}, named[-5:]
    both = [limits for limits in named if set(limits) == {1, 2}]
    assert len(both) >= len(named) / 2, named[-5:]  # a gateway is left out only while idle
    # the quota, plus at most what an unsaturated gateway lends a saturated one (allocation.LEND)
    sums = [sum(limits.values()) / QUOTA for limits in both]
    measured("listed limits / quota, most", max(sums), (0.999, 1 + LEND))
    assert all(0.999 <= s <= (1 + LEND) * 1.001 for s in sums), sorted(sums)[-5:]
    assert all(a["quota"] == "producer_byte_rate" and a["entity"] == {"user": "ANONYMOUS",
                                                                      "client_id": ""}
               for a in run.allocations)


def test_two_gateways_hold_the_quota_between_them(run: Run) -> None:
    rates = run.user[8:KILL_S]
    held = measured("both / quota", sum(rates) / len(rates) / QUOTA, BOTH)
    assert BOTH[0] <= held <= BOTH[1], run.seconds(8, KILL_S)


def test_with_the_worker_dead_each_gateway_holds_its_static_split(run: Run) -> None:
    # allocations came until the kill and none after it
    last = max(a["ts"] for a in run.allocations)
    before = measured("last allocation, s before the kill", (run.killed_ms - last) / 1000,
                      LAST_ALLOCATION_S)
    assert LAST_ALLOCATION_S[0] <= before <= LAST_ALLOCATION_S[1], (last, run.killed_ms)
    # the last allocation holds for its validity, then quota / 2 on each gateway: still the quota
    first = KILL_S + VALIDITY_S + 2
    for rates in run.each:
        held = measured("each / split", sum(rates[first:RUN_S]) / (RUN_S - first) / (QUOTA / 2),
                        SPLIT)
        assert SPLIT[0] <= held <= SPLIT[1], run.seconds(first, RUN_S)
    rates = run.user[first:RUN_S]
    held = measured("both dead / quota", sum(rates) / len(rates) / QUOTA, SPLIT)
    assert SPLIT[0] <= held <= SPLIT[1], [round(r / QUOTA, 2) for r in run.user]

