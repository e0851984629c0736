"""A rolling install of the broker plugin, brokers with and without it side by side, on a
three-broker Apache Kafka with Kafka's default quota windows.

The cluster starts without the plugin, and the loader's producer_byte_rate is set in Kafka
itself (kafka-configs): X on each broker. The workers' config gives it a cluster-wide 3X, and
while only broker 1 runs the plugin and reports usage, an allocation puts all 3X on broker 1,
as the workers would. Broker 1 is restarted with the plugin (one step of the rolling install)
and one producer writes to a partition led by broker 1, another to one led by broker 2, each
offering 3X. Kafka's own configs are a ceiling in the plugin, so each broker holds X: the
loader never gets more than Kafka's own per-broker quotas give it while the install rolls.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.admin.config_topic import write_records
from app.admin.entities import canonical_record
from app.clients.runner import run_clients, summed
from app.devstack.broker_plugin import PLUGIN_JAR, create_assigned_topic, plugin_properties
from app.devstack.client_quotas import set_client_quotas
from app.devstack.kafka import KafkaCluster, broker_count
from app.devstack.launcher import isolated_env
from app.engine.configs import parse_config_record
from app.kafka.topics import create_topics
from tests.integration.measured import measured
from tests.integration.plugin_control import allocation, scrape, send

pytestmark = pytest.mark.integration

PER_BROKER = 200_000  # bytes/s: the loader's producer_byte_rate in Kafka's own configs
CLUSTER = 3 * PER_BROKER  # bytes/s: its cluster-wide quota in the workers' configs
WARM_S, MEASURE_S, LEAD_S = 12, 18, 2.0
#: x PER_BROKER: what Kafka's own quota lets through once its window is full; 1.14x on either
#: broker in three runs on the 2-core box (bench/RESULTS.md)
HELD = (0.6, 1.3)
#: the broker with the plugin over the one without, in the same run: 1.00x in three runs
#: (bench/RESULTS.md); without the ceiling it lets its allocation through, 2.5x
SAME = (0.85, 1.1)
RULES = Path(__file__).resolve().parents[2] / "deploy" / "broker-plugin" / "metrics" / \
    "jmx-exporter.yaml"


@dataclass
class Rollout:
    rates: dict[int, list[float]]  # broker -> the loader's bytes/s acknowledged by it, per second
    held: dict[str, float]  # broker 1's plugin series once restarted with the plugin


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rollout]:
    prefix = f"bpr{uuid.uuid4().hex[:8]}"
    env = isolated_env(prefix)
    kafka = KafkaCluster(brokers=3, work_dir=tmp_path_factory.mktemp("bpr-kafka"),
                         classpath=(PLUGIN_JAR,), metrics_rules=RULES).start()
    bootstrap = kafka.bootstrap()
    try:
        asyncio.run(create_topics(bootstrap, [(env[f"QS_TOPIC_{kind}"], 1, {})
                                              for kind in ("DIRECTIVES", "REQUEST", "CONFIGS")]))
        for broker in (1, 2):
            create_assigned_topic(bootstrap, f"{prefix}-on-{broker}", [[broker]])
        set_client_quotas(bootstrap, "loader", {"producer_byte_rate": PER_BROKER})
        update = parse_config_record({"type": "quota_config", "v": 1,
                                      "ts": int(time.time() * 1000), "entity": {"client_id": "loader"},
                                      "quotas": {"producer_byte_rate": CLUSTER}})
        asyncio.run(write_records(bootstrap, env["QS_TOPIC_CONFIGS"],
                                  [(canonical_record(update), update)], None))
        asyncio.run(send(bootstrap, env["QS_TOPIC_DIRECTIVES"],
                         [(0, allocation("loader", CLUSTER, {1: CLUSTER}, 300_000))]))
        # one step of the rolling install: broker 1 restarted with the plugin
        kafka.restart(0, changes=plugin_properties(env, brokers=3))
        node = kafka.nodes[0]
        deadline = time.monotonic() + 90
        while not (broker_count("127.0.0.1", node.ports["INTERNAL"]) == 3
                   and _in_force(node.metrics_url)):
            assert time.monotonic() < deadline, "broker 1 did not come back with the plugin"
            time.sleep(0.5)
        held = scrape(node.metrics_url)
        epoch = time.time() + LEAD_S
        seconds = WARM_S + MEASURE_S
        out = run_clients([(f"on-{broker}", [
            "--epoch", str(epoch), "--seconds", str(seconds), "produce",
            "--library", "confluent-kafka", "--bootstrap", bootstrap,
            "--topic", f"{prefix}-on-{broker}", "--client-id", "loader",
            "--rate", str(CLUSTER)]) for broker in (1, 2)], timeout=seconds + LEAD_S + 60)
    finally:
        kafka.stop(graceful=False)  # throwaway: its data goes with it
    yield Rollout({broker: summed([out[f"on-{broker}"]], 0, seconds) for broker in (1, 2)}, held)


def _in_force(url: str) -> bool:
    try:
        return scrape(url).get("quota_streams_plugin_allocations_in_force", 0.0) >= 1
    except OSError:  # the broker's exporter is not serving yet
        return False


def _mean(rates: list[float]) -> float:
    window = rates[WARM_S:WARM_S + MEASURE_S]
    return sum(window) / len(window)


def test_the_broker_with_the_plugin_lets_through_what_the_one_without_does(
        rollout: Rollout) -> None:
    """Broker 1 holds an allocation of 3X and Kafka's own X: it lets the loader through at the
    rate broker 2, without the plugin, does, not at its allocation."""
    assert rollout.held["quota_streams_plugin_allocations_in_force"] >= 1
    ratio = measured("with the plugin / without", _mean(rollout.rates[1]) / _mean(rollout.rates[2]),
                     SAME)
    assert SAME[0] <= ratio <= SAME[1], {b: [round(r / PER_BROKER, 2) for r in rates]
                                         for b, rates in rollout.rates.items()}


@pytest.mark.parametrize("broker", [1, 2])
def test_each_broker_holds_kafkas_own_quota(rollout: Rollout, broker: int) -> None:
    held = measured("x its Kafka quota", _mean(rollout.rates[broker]) / PER_BROKER, HELD)
    assert HELD[0] <= held <= HELD[1], [round(r / PER_BROKER, 2) for r in rollout.rates[broker]]
