"""Scenario files: every shipped scenario loads, and mistakes are one-line errors naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from app.sim.meter import settled_after
from app.sim.scenario import ScenarioError, load_scenario, parse_scenario

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def minimal(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"brokers": 3, "clients": [
        {"name": "p", "kind": "producer", "user": "alice", "rate": 1000}]}
    d.update(over)
    return d


@pytest.mark.parametrize("name", ["mixed", "cluster-produce", "broker-produce", "ip-storm", "topic-storm",
                                  "cluster-allocations", "plugin-uneven"])
def test_shipped_scenarios_load(name: str) -> None:
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    assert sc.name == name
    assert sc.clients and sc.quotas
    sc.quota_configs()  # every quota is one the workers accept


def test_twins_differ_only_in_scope() -> None:
    cluster = yaml.safe_load((SCENARIOS / "cluster-produce.yaml").read_text())
    broker = yaml.safe_load((SCENARIOS / "broker-produce.yaml").read_text())
    assert (cluster.pop("scope"), broker.pop("scope")) == ("cluster", "broker")
    for d in (cluster, broker):
        d.pop("name"), d.pop("description")
    assert cluster == broker


def test_defaults() -> None:
    sc = parse_scenario(minimal())
    assert sc.brokers == (1, 2, 3)
    assert sc.scope == "broker" and sc.flush_interval_ms == 100 and sc.aggregate
    client = sc.clients[0]
    assert client.brokers == (1, 2, 3) and client.listener == "PLAINTEXT"
    assert client.honours_throttle
    assert sc.worker_env() == {"QS_SCOPE": "broker", "QS_ACCOUNTING": "kafka",
                               "QS_CLUSTER_ENFORCEMENT": "directives", "QS_EVENT_FORMAT": "columnar"}


def test_windows_become_worker_settings() -> None:
    sc = parse_scenario(minimal(scope="cluster", windows={"num": 6, "size_ms": 500}))
    assert sc.worker_env() == {"QS_SCOPE": "cluster", "QS_ACCOUNTING": "kafka", "QS_QUOTA_WINDOW_NUM": "6",
                               "QS_QUOTA_WINDOW_SIZE_MS": "500", "QS_CLUSTER_ENFORCEMENT": "directives",
                               "QS_EVENT_FORMAT": "columnar"}


def test_allocations_are_a_cluster_scope_enforcement() -> None:
    sc = parse_scenario(minimal(scope="cluster", enforcement="allocations", workers_stop=30))
    assert sc.worker_env()["QS_CLUSTER_ENFORCEMENT"] == "allocations" and sc.workers_stop == 30
    # the simulated brokers hold allocations over the gateways' windows: 11 x 100 ms
    assert sc.worker_env()["QS_ENFORCER_WINDOW_MS"] == "1100"
    with pytest.raises(ScenarioError, match="cluster"):
        parse_scenario(minimal(enforcement="allocations"))
    with pytest.raises(ScenarioError, match="enforcement"):
        parse_scenario(minimal(scope="cluster", enforcement="sometimes"))


def test_phases_are_named_ordered_and_inside_the_run() -> None:
    sc = parse_scenario(minimal(duration=60, phases=[{"name": "a", "start": 10, "end": 30},
                                                     {"name": "b", "start": 30}]))
    assert [(p.name, p.start, p.end) for p in sc.phases] == [("a", 10, 30), ("b", 30, 60)]
    for bad, match in (([{"name": "a", "start": 30, "end": 10}], "after its start"),
                       ([{"name": "a", "end": 30}, {"name": "b", "start": 20}], "before 'a' ends"),
                       ([{"name": "a", "end": 10}, {"name": "a", "start": 20}], "two phases"),
                       ([{"start": 1}], "name"), ([{"name": "a", "until": 3}], "until")):
        with pytest.raises(ScenarioError, match=match):
            parse_scenario(minimal(phases=bad))


def test_a_phase_settles_after_three_seconds_in_a_row_within_the_band() -> None:
    assert settled_after([2.0, 1.1, 0.9, 1.5, 1.0, 1.19, 0.81, 3.0]) == 4
    assert settled_after([1.0, 1.0]) is None and settled_after([1.0, 1.0, 1.0]) == 0


def test_forever_and_overrides() -> None:
    sc = parse_scenario(minimal(duration="forever", warmup=20))
    assert sc.duration is None
    assert sc.with_run(30).warmup == 15  # a short run keeps half of it to measure
    assert sc.with_run(100).warmup == 20
    assert sc.with_run(30, 5).warmup == 5
    with pytest.raises(ScenarioError, match="warmup"):
        sc.with_run(10, 10)


def test_storm_addresses_and_strictness() -> None:
    sc = parse_scenario(minimal(clients=[
        {"kind": "connection-storm", "ip": "10.0.0.254", "ips": 3},
        {"kind": "topic-storm", "user": "ops", "api_version": 5},
        {"kind": "topic-storm", "user": "ops", "api": "DeleteTopics", "api_version": 5},
    ]))
    storm, legacy, delete = sc.clients
    assert storm.addresses == ["10.0.0.254", "10.0.0.255", "10.0.1.0"]
    assert not legacy.strict and delete.strict  # DeleteTopics is strict from v5


@pytest.mark.parametrize("data, message", [
    ([], "must be a mapping"),
    (minimal(scope="global"), "scope"),
    (minimal(colour="red"), "unknown field"),
    (minimal(clients=[]), "at least one client"),
    (minimal(clients=[{"kind": "hacker", "user": "x"}]), "kind"),
    (minimal(clients=[{"kind": "producer", "user": "x"}]), "rate is required"),
    (minimal(clients=[{"kind": "producer", "rate": 1}]), "user and/or a client_id"),
    (minimal(clients=[{"kind": "producer", "user": "x", "rate": -1}]), "rate"),
    (minimal(clients=[{"kind": "producer", "user": "x", "rate": 1, "brokers": [7]}]), "not among"),
    (minimal(clients=[{"kind": "producer", "user": "x", "rate": 1, "listener": "SSL"}]), "listener"),
    (minimal(clients=[{"kind": "producer", "user": "x", "rate": 1, "ip": "nope"}]), "not an IP"),
    (minimal(clients=[{"name": "a", "kind": "producer", "user": "x", "rate": 1},
                      {"name": "a", "kind": "consumer", "user": "x", "rate": 1}]), "two clients"),
    (minimal(quotas=[{"entity": {"user": "x"}, "quotas": {"producer_byte_rate": 0}}]), "greater than 0"),
    (minimal(quotas=[{"entity": {"ip": "1.2.3.4", "user": "x"},
                      "quotas": {"connection_creation_rate": 1}}]), "cannot be combined"),
    (minimal(duration=10, warmup=10), "warmup"),
])
def test_bad_scenarios(data: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("clients: [\n")
    with pytest.raises(ScenarioError, match="bad.yaml: not valid YAML"):
        load_scenario(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("brokers: 0\nclients: []\n")
    with pytest.raises(ScenarioError, match=r"wrong.yaml: brokers must be >= 1"):
        load_scenario(wrong)


def test_plugin_brokers_hold_allocations_over_kafkas_own_window() -> None:
    sc = parse_scenario(minimal(scope="cluster", enforcement="plugin",
                                windows={"num": 6, "size_ms": 500}))
    env = sc.worker_env()
    assert env["QS_CLUSTER_ENFORCEMENT"] == "allocations"
    assert env["QS_ENFORCER_WINDOW_MS"] == "3000"
    with pytest.raises(ScenarioError, match="cluster"):
        parse_scenario(minimal(enforcement="plugin"))


def test_a_buffered_producer_names_its_partitions_by_their_leaders() -> None:
    sc = parse_scenario(minimal(scope="cluster", clients=[{
        "name": "p", "kind": "buffered-producer", "client_id": "c", "rate": 1000,
        "leaders": [1, 1, 2], "moved_leaders": [3, 1, 2], "moved_at": 30}]))
    client = sc.clients[0]
    assert client.leaders == (1, 1, 2) and client.moved_leaders == (3, 1, 2)
    assert client.brokers == (1, 2, 3) and client.moved_at == 30
    with pytest.raises(ScenarioError, match="as many partitions"):
        parse_scenario(minimal(clients=[{"kind": "buffered-producer", "client_id": "c",
                                         "rate": 1, "leaders": [1], "moved_leaders": [1, 2],
                                         "moved_at": 3}]))
    with pytest.raises(ScenarioError, match="go together"):
        parse_scenario(minimal(clients=[{"kind": "buffered-producer", "client_id": "c",
                                         "rate": 1, "moved_leaders": [1, 2, 3]}]))
    with pytest.raises(ScenarioError, match="buffered-producer"):
        parse_scenario(minimal(clients=[{"kind": "producer", "client_id": "c", "rate": 1,
                                         "leaders": [1]}]))
    with pytest.raises(ScenarioError, match="leader"):
        parse_scenario(minimal(clients=[{"kind": "buffered-producer", "client_id": "c",
                                         "rate": 1, "leaders": [9]}]))
