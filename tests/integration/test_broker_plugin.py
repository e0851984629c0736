"""The broker plugin on a three-broker Apache Kafka with Kafka's default quota windows: every
quota a quota callback can hold, held cluster-wide by the brokers themselves, no gateway.

The module's cluster loads jvm/broker-plugin's jar (`make setup` builds it) with no
`quota.window.*` override: its quota callback follows the control and config topics, its
metrics reporter writes each broker's usage and throttles to the request topic. One worker in
cluster scope with allocations, its span and window left at their defaults, divides the quotas
among the brokers. Kafka's 11 x 1 s windows answer a broker's bound with mutes of seconds; the
brokers report those mutes, so a muting broker keeps its share (docs/allocations.md).

- `loader`: producer_byte_rate Q over partitions led 3/2/1 by the brokers, two confluent-kafka
  producers offering 2 x Q straight to the brokers;
- `terraform`: controller_mutation_rate, a CreateTopics storm sent to all three brokers: the
  active controller charges every mutation of the cluster, and holds the whole quota;
- `pinger`: request_percentage, a producer of small records as fast as it can: its request
  time, reported from Kafka's request-time sensors, is divided among the brokers.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from app.admin.config_topic import write_records
from app.admin.entities import canonical_record
from app.clients.runner import per_second, run_clients, summed
from app.devstack.broker_plugin import create_assigned_topic, plugin_cluster
from app.devstack.launcher import LocalCluster, isolated_env
from app.engine.allocation import LEND
from app.engine.configs import parse_config_record
from app.kafka.whole_topic import read_topic
from tests.integration.measured import measured

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUOTA = 600_000  # bytes/s: client id loader's producer_byte_rate, over the whole cluster
MUTATIONS = 5  # partitions/s: client id terraform's controller_mutation_rate
PERCENT = 2.0  # client id pinger's request_percentage, over the whole cluster
WARM_S, MEASURE_S, LEAD_S = 12, 30, 2.0
STORM_S, PING_S = 20, 25
#: the loader runs on after the worker is killed (at WARM_S + MEASURE_S): the last allocation
#: holds for its validity (QS_ALLOCATION_VALIDITY_MS, 5 s), then each broker the static split
ORPHAN_S, VALIDITY_S = 40, 5
#: x QUOTA: the loader with the workers dead (the test's docstring): held, never above the quota
ORPHANED = (0.45, 1.15)
#: each partition's leader: 3/2/1
LEADERS = [1, 1, 1, 2, 2, 3]


@dataclass
class Run:
    rates: list[float]  # the loader's bytes/s acknowledged to both producers, per second
    allocations: list[dict[str, Any]]
    usage: list[dict[str, Any]]  # the brokers' request events
    dead: list[dict[str, Any]]  # dead letters of the brokers' records
    storm: list[dict[str, Any]]  # the topic storm's report lines
    pinged: list[dict[str, Any]]  # pinger's report lines
    epoch: float  # when the loader started (wall clock, s)
    killed: float  # when the worker was killed (wall clock, s), WARM_S + MEASURE_S after


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    prefix = f"bp{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(prefix), "QS_PARTITIONS": "2", "QS_SCOPE": "cluster",
           "QS_CLUSTER_ENFORCEMENT": "allocations"}
    kafka = plugin_cluster(env, tmp_path_factory.mktemp("bp-kafka")).start()
    plain = kafka.bootstrap()
    workers = LocalCluster(1, bootstrap=plain, work_dir=tmp_path_factory.mktemp("bp"), env=env)
    try:
        workers.start()
        stamp = int(time.time() * 1000)
        updates = [parse_config_record({"type": "quota_config", "v": 1, "ts": stamp,
                                        "entity": {"client_id": client}, "quotas": quotas})
                   for client, quotas in (("loader", {"producer_byte_rate": QUOTA}),
                                          ("terraform", {"controller_mutation_rate": MUTATIONS}),
                                          ("pinger", {"request_percentage": PERCENT}))]
        asyncio.run(write_records(plain, env["QS_TOPIC_CONFIGS"],
                                  [(canonical_record(u), u) for u in updates], None))
        topic = f"{prefix}-data"
        create_assigned_topic(plain, topic, [[b] for b in LEADERS])
        workers.wait_ready(timeout=60)
        later = run_clients([
            ("storm", ["--epoch", str(time.time() + LEAD_S), "--seconds", str(STORM_S),
                       "topic-storm", "--library", "kafka-python", "--bootstrap", plain,
                       "--client-id", "terraform", "--rate", "4", "--partitions", "5",
                       "--prefix", f"{prefix}-storm"]),
            ("pinger", ["--epoch", str(time.time() + LEAD_S), "--seconds", str(PING_S),
                        "produce", "--library", "confluent-kafka", "--bootstrap", plain,
                        "--topic", topic, "--client-id", "pinger", "--rate", "400000",
                        "--record-bytes", "100"]),
        ], timeout=max(STORM_S, PING_S) + LEAD_S + 60)
        # the loader, then the worker killed while its allocations are in force
        epoch = time.time() + LEAD_S
        killed: list[float] = []

        def kill() -> None:
            workers.kill_worker(0)
            killed.append(time.time())

        killer = threading.Timer(epoch + WARM_S + MEASURE_S - time.time(), kill)
        killer.start()
        seconds = WARM_S + MEASURE_S + ORPHAN_S
        out = run_clients([(f"loader-{i}", [
            "--epoch", str(epoch), "--seconds", str(seconds), "produce",
            "--library", "confluent-kafka", "--bootstrap", plain, "--topic", topic,
            "--client-id", "loader", "--rate", str(QUOTA)]) for i in (1, 2)],
            timeout=seconds + LEAD_S + 60)
        killer.join()
        rates = summed(list(out.values()), 0, seconds)
        control = asyncio.run(read_topic(plain, env["QS_TOPIC_DIRECTIVES"]))
        requests = asyncio.run(read_topic(plain, env["QS_TOPIC_REQUEST"]))
        dead = asyncio.run(read_topic(plain, env["QS_TOPIC_DEADLETTER"]))
    finally:
        workers.stop()
        kafka.stop(graceful=False)  # throwaway: its data goes with it
    records = [orjson.loads(r.value) for r in control if r.value]
    usage = [e for r in requests for e in orjson.loads(r.value).get("events", [])]
    yield Run(rates, [r for r in records if r.get("kind") == "allocation"], usage,
              [orjson.loads(r.value) for r in dead if (r.key or b"").startswith(b"broker/")],
              later["storm"], later["pinger"], epoch, killed[0])


def test_the_brokers_hold_the_loader_near_its_cluster_wide_quota(run: Run) -> None:
    """Over 30 s after the warm-up, with Kafka's default windows and 3/2/1 leaders. Measured
    on the 2-core box with one core spinning (`bench/bench_closed_loop.py`, bench/RESULTS.md),
    12 runs: 0.75-0.91x (median 0.83x). Each producer's 256 KiB of unanswered
    requests ties its brokers together: a broker muting it for seconds stalls it on the others
    too (bench/RESULTS.md); a broken loop reads 2x (no bound) or a third of it (the brokers
    starved in turn)."""
    rates = run.rates[WARM_S:WARM_S + MEASURE_S]
    mean = sum(rates) / len(rates)
    measured("loader x quota", mean / QUOTA, (0.6, 1.3))
    assert 0.6 * QUOTA <= mean <= 1.3 * QUOTA, (round(mean / QUOTA, 3),
                                               [round(r / QUOTA, 2) for r in run.rates])


def test_each_broker_is_allocated_its_part_and_reports_its_mutes(run: Run) -> None:
    loader = [a for a in run.allocations if a["quota"] == "producer_byte_rate"]
    assert loader, "no allocation was published"
    last = loader[-1]
    assert last["entity"] == {"user": "", "client_id": "loader"}
    limits = {e["enforcer"]: e["limit"] for e in last["enforcers"]}
    assert set(limits) == {1, 2, 3}
    # the quota, plus at most what the unsaturated brokers lend the saturated (allocation.LEND)
    assert QUOTA * 0.999 <= sum(limits.values()) <= QUOTA * (1 + LEND) * 1.001
    # the brokers reported the mutes they answered the loader with, and the workers counted
    # a muting broker saturated
    throttles = [e for e in run.usage if e["client_id"] == "loader" and e.get("throttle_ms")]
    assert {e["broker"] for e in throttles} == {1, 2, 3}
    assert all(any(e["saturated"] for e in a["enforcers"]) for a in loader[3:])


def test_the_brokers_report_usage_pre_aggregated_once_a_second(run: Run) -> None:
    assert not run.dead, run.dead[:3]
    loader = [e for e in run.usage if e["client_id"] == "loader" and e["api"] == "Produce"]
    assert {e["broker"] for e in loader} == {1, 2, 3}
    assert all(e["type"] == "request" and e["bytes"] >= 0 for e in loader)
    # one event per broker, client and second: several requests each
    assert sum(e["count"] > 1 for e in loader) >= 0.8 * len(loader)
    seconds = [(e["broker"], e["ts"]) for e in loader]
    assert all(ts % 1000 == 0 for _, ts in seconds)
    assert len(seconds) == len(set(seconds))  # one look a second, each its own second


def test_the_active_controller_holds_a_controller_mutation_quota_cluster_wide(run: Run) -> None:
    """A storm of 4 CreateTopics of 5 partitions a second (20/s, 4x the quota) through all three
    brokers: every one is forwarded to the active controller, which charges it against the
    whole quota from the config topic. Its token bucket admits a burst of 11 s of the quota,
    then the quota a second: 0.97-1.00x of that in 12 runs on the loaded 2-core box."""
    partitions = sum(per_second(run.storm, "partitions").values())
    allowed = MUTATIONS * 11 + MUTATIONS * STORM_S
    offered = 4 * 5 * STORM_S  # what it asked for: nothing held, it would have had it
    measured("partitions x allowed", partitions / allowed, (0.7, 1.15))
    assert 0.7 * allowed <= partitions <= 1.15 * allowed < offered, partitions


def test_a_request_percentage_is_divided_among_the_brokers_by_their_request_time(run: Run) -> None:
    """The reporter writes each client's request time from Kafka's request-time sensors; the
    workers allocate request_percentage like the byte rates, and the brokers hold their shares
    with Kafka's request quota: the time they report, summed over them, is the quota, where each
    holding it alone would let three times through. 12 runs on the loaded 2-core box:
    0.70-0.91x of the quota (the reporter's seconds at either end are left out)."""
    ping = [e for e in run.usage if e["client_id"] == "pinger" and e["api"] == "Request"]
    assert {e["broker"] for e in ping} == {1, 2, 3}
    per_second_ms: dict[int, float] = {}
    for e in ping:
        per_second_ms[e["ts"]] = per_second_ms.get(e["ts"], 0.0) + e["thread_time_ms"]
    seconds = sorted(per_second_ms)[5:-2]  # after its first allocations, before its end
    assert len(seconds) >= 10
    mean_percent = sum(per_second_ms[s] for s in seconds) / len(seconds) / 10.0  # ms/s -> %
    measured("request time x quota", mean_percent / PERCENT, (0.5, 1.5))
    assert 0.5 * PERCENT <= mean_percent <= 1.5 * PERCENT, mean_percent
    assert any(e.get("throttle_ms") for e in ping)
    assert any(a["quota"] == "request_percentage" for a in run.allocations)


def test_with_the_workers_dead_the_brokers_hold_the_static_split(run: Run) -> None:
    """The worker killed while the loader's allocations were in force: each broker keeps the
    last one for its validity, then holds quota / 3 from the config topic (the plugin's
    fail-safe), so the cluster still holds the quota: with leaders 3/2/1 the broker leading half
    the loader's partitions holds a third of the quota for them, and the producers, spreading
    records evenly, get about two thirds of it, never more than all of it: 0.66x and 0.69x in
    two runs on the 2-core box with one core spinning, over the 53 s after the validity of a
    60 s fallback (`bench/bench_closed_loop.py`, bench/RESULTS.md). A split over brokers x
    listeners (KRaft lists a broker once per listener) reads 0.24-0.30x; a fallback with no
    bound reads 2x, one with the whole quota per broker up to that."""
    killed_s = run.killed - run.epoch
    assert abs(killed_s - (WARM_S + MEASURE_S)) <= 5, killed_s
    # the loader's allocations were in force when the worker died, and none came after
    loader = [a for a in run.allocations if a["quota"] == "producer_byte_rate"]
    assert any(a["valid_until"] / 1000 > run.killed for a in loader), run.killed
    assert not [a for a in loader if a["ts"] / 1000 > run.killed], run.killed
    first = int(killed_s) + VALIDITY_S + 2
    rates = run.rates[first:]
    held = measured("loader x quota, workers dead", sum(rates) / len(rates) / QUOTA, ORPHANED)
    assert ORPHANED[0] <= held <= ORPHANED[1], [round(r / QUOTA, 2) for r in run.rates[first:]]
