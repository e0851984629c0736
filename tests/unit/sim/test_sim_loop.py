"""The closed loop against the pure engine (`app.sim.offline`), the report files and the CLI.

The offline loop is the live one minus Kafka: the same brokers, clients, engine and active sets,
with a fixed latency between a flush and its directives reaching the brokers.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import orjson
import pytest

from app import settings
from app.cli import main
from app.engine.engine import EngineSettings
from app.sim import report
from app.sim.meter import Summary
from app.sim.offline import OfflineRun, run_offline
from app.sim.live import LiveRun
from app.kafka.security import PLAINTEXT
from app.signing import Signing
from app.sim.scenario import load_scenario
from app.sim.world import World
from app.subscriber.active_set import ActiveSet
from app.subscriber.consumer import wall_clock_ms
from app.usage.publisher import EventPublisher
from app.usage.recorder import CONNECTION, MUTATION, REQUEST
from app.usage.records import RecordEncoder
from tests.unit.fake_producer import Producer

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def steady(name: str, latency_ms: int = 150, seconds: float = 240,
           **windows: int) -> tuple[OfflineRun, dict[tuple[str, str], Summary]]:
    sc = load_scenario(SCENARIOS / f"{name}.yaml")
    settings = EngineSettings(scope=sc.scope, **windows)
    run = run_offline(sc, latency_ms=latency_ms, settings=settings, duration=seconds)
    by_key = {(s.quota, s.entity): s for s in run.world.meter.summaries(sc.warmup, run.end_ms)}
    return run, by_key


def test_cluster_scope_holds_the_cluster_wide_rate_at_the_quota() -> None:
    run, s = steady("cluster-produce")
    alice = s[("producer_byte_rate", "user=alice")]
    assert alice.ratio is not None and 0.9 <= alice.ratio <= 1.1, alice
    assert alice.outcomes["throttled"] > 0
    for name in ("bob-app", "carol-reader"):
        assert run.world.client(name).stats.throttled == 0


def test_broker_scope_lets_each_broker_reach_the_quota() -> None:
    run, s = steady("broker-produce")
    alice = s[("producer_byte_rate", "user=alice")]
    assert alice.ratio is not None and alice.limit is not None
    assert 2.7 <= alice.ratio <= 3.3, alice
    assert all(0.85 <= r / alice.limit <= 1.1 for r in alice.per_broker.values()), alice.per_broker
    for name in ("bob-app", "carol-reader"):
        assert run.world.client(name).stats.throttled == 0


def test_topic_storms_strict_rejected_legacy_throttled() -> None:
    run, _ = steady("topic-storm", seconds=60)
    strict, legacy = run.world.client("strict-storm").stats, run.world.client("legacy-storm").stats
    assert strict.rejected > 0
    assert legacy.rejected == 0 and legacy.throttled > 0
    mutation = [d for d in run.directives if d["quota"] == "controller_mutation_rate"]
    assert {d["action"] for d in mutation if d["entity"]["user"] == "ops"} == {"reject"}
    assert {d["action"] for d in mutation if d["entity"]["user"] == "legacy-ops"} == {"throttle"}


def test_report_files(tmp_path: Path) -> None:
    run, s = steady("cluster-produce", seconds=30)
    sc = run.world.scenario
    summaries = run.world.meter.summaries(sc.warmup, run.end_ms)
    rows = list(run.world.meter.series(run.end_ms))
    assert report.write_csv(tmp_path / "t.csv", rows) == len(rows)
    with open(tmp_path / "t.csv") as f:
        data = list(csv.DictReader(f))
    assert tuple(data[0]) == report.CSV_FIELDS
    alice = [r for r in data if r["entity"] == "user=alice" and r["broker"] == "all"]
    assert [float(r["t_s"]) for r in alice] == [float(i) for i in range(1, 31)]
    per_broker = [r for r in data if r["entity"] == "user=alice" and r["t_s"] == "5.0" and r["broker"] != "all"]
    total = next(r for r in alice if r["t_s"] == "5.0")
    assert sum(float(r["achieved"]) for r in per_broker) == pytest.approx(float(total["achieved"]))
    if report.write_parquet(tmp_path / "t.parquet", rows):
        import pyarrow.parquet as pq

        assert pq.read_table(tmp_path / "t.parquet").num_rows == len(rows)
    if report.plot(tmp_path / "r.png", rows, summaries, "t", sc.scope, sc.warmup):
        assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plain = report.entity_table(summaries, sc.scope, colour=False)
    assert "user=alice" in plain and "\x1b[" not in plain
    assert "\x1b[" in report.entity_table(summaries, sc.scope, colour=True)


def test_formatting() -> None:
    assert report.fmt_amount(1048576, "B/s") == "1.00 MiB/s"
    assert report.fmt_amount(512 * 1024, "B/s") == "512.00 KiB/s"
    assert report.fmt_amount(None, "B/s") == "-"
    assert report.fmt_amount(20, "conn/s") == "20.0 conn/s"
    assert report.colour_for(1.05) == report.GREEN and report.colour_for(3.0) == report.RED


def test_simulate_offline_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["simulate", str(SCENARIOS / "topic-storm.yaml"), "--offline", "--duration", "20",
                 "--warmup", "5", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "offline" and summary["steady_state_s"] == 15
    assert summary["clients"]["strict-storm"]["rejected"] > 0
    assert (out / "timeseries.csv").exists()
    printed = capsys.readouterr().out
    assert "controller_mutation_rate" in printed and "strict-storm" in printed


def test_simulate_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(tmp_path / "nope.yaml"), "--offline"]) == 2
    assert "cannot read scenario" in capsys.readouterr().err
    assert main(["simulate", str(SCENARIOS / "mixed.yaml"), "--offline"]) == 2
    assert "--duration" in capsys.readouterr().err


def test_demo_finds_its_scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.commands.demo import find_scenario

    monkeypatch.chdir(tmp_path)  # not the project directory: found next to the package
    assert find_scenario(None) == SCENARIOS / "demo.yaml"
    assert find_scenario("x.yaml") == Path("x.yaml")


def test_live_subscribers_clock_runs_the_world_first() -> None:
    """The live run's subscribers read `LiveRun.clock` right before applying directives: the
    world must first have run every action due by then (and none past the run's end), so no
    action is decided with a directive that arrived after it happened."""
    sc = load_scenario(SCENARIOS / "ip-storm.yaml")
    run = LiveRun(sc, "127.0.0.1:9", settings.load({}), security=PLAINTEXT,
                  signing=Signing())
    assert run.clock() > 0  # before the world exists: just the wall clock
    start = float(wall_clock_ms() - 2000)
    run.world = World(sc, {b: ActiveSet(b) for b in sc.brokers}, start)
    run._end = start + 1500
    now = run.clock()
    assert now >= start + 2000 and run.world.now == start + 1500
    storm = run.world.client("storm-one-ip").stats
    assert storm.attempts == 151  # one every 10 ms from 0 to the end at 1500 ms, none after


async def test_a_live_run_sends_each_brokers_flush_as_one_record_per_kind_keyed_by_it() -> None:
    sc = load_scenario(SCENARIOS / "cluster-produce.yaml")
    run = LiveRun(sc, "127.0.0.1:9", settings.load({}), security=PLAINTEXT,
                  signing=Signing())
    start = float(wall_clock_ms())
    world = run.world = World(sc, {b: ActiveSet(b) for b in sc.brokers}, start, drops=run.drops)
    world.advance(start + sc.flush_interval_ms - 1)  # one flush interval
    producer = Producer()
    topics = {REQUEST: "req", CONNECTION: "conn", MUTATION: "mut"}
    await run._send(EventPublisher(producer, topics, RecordEncoder(drops=run.drops)),  # type: ignore[arg-type]
                    world)
    sent = {(topic, key, partition) for topic, _, key, partition in producer.sent}
    assert sent == {(topic, f"broker/{b}".encode(), b % 8) for b in sc.brokers
                    for topic in ("req", "conn")}  # one record per broker and kind
    assert run.records_sent == len(producer.sent) == 6
    events = [e for _, value, _, _ in producer.sent for e in orjson.loads(value)["events"]]
    assert run.events_sent == len(events) > 6
    assert {e["user"] for e in events if e["type"] == "request"} >= {"alice", "bob"}
