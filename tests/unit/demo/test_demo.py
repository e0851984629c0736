"""The demo's file, its client command lines and its view, without starting anything."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from app.clients.__main__ import build_parser
from app.demo.lag import Lag, largest_lag
from app.demo.run import ClientRun, DemoRun, client_argv
from app.demo.spec import DemoClient, load_demo, parse_demo
from app.demo.view import DemoView, charge_of
from app.sim.scenario import ScenarioError
from app.subscriber.watcher import DirectiveWatcher

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def spec_data(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "topics": {"t": 2},
        "quotas": [{"entity": {"client_id": "p"}, "quotas": {"producer_byte_rate": 1000}},
                   {"entity": {"client_id": "<default>"}, "quotas": {"producer_byte_rate": 500}},
                   {"entity": {"ip": "127.0.0.9"}, "quotas": {"connection_creation_rate": 10}}],
        "clients": [{"name": "p", "program": "produce", "client_id": "p", "topic": "t", "rate": 4000},
                    {"name": "q", "program": "produce", "client_id": "q", "topic": "t", "rate": 4000,
                     "gateway": 1},
                    {"name": "s", "program": "connection-storm", "sources": ["127.0.0.9"], "rate": 50}],
    }
    data.update(over)
    return data


def test_the_shipped_demo_file_is_valid_and_uses_every_program_and_library() -> None:
    spec = load_demo(SCENARIOS / "demo.yaml")
    assert {c.program for c in spec.clients} == {"produce", "consume", "connection-storm", "topic-storm"}
    assert {c.library for c in spec.clients if c.program != "connection-storm"} == {
        "confluent-kafka", "kafka-python", "aiokafka"}
    assert spec.gateways == 2 and {c.gateway for c in spec.clients} == {0, 1}


@pytest.mark.parametrize("change, message", [
    ({"clients": [{"name": "x", "program": "fly", "client_id": "x"}]}, "program"),
    ({"clients": [{"name": "x", "program": "produce", "client_id": "x", "topic": "nope",
                   "rate": 1}]}, "topic must be one of"),
    ({"clients": [{"name": "x", "program": "produce", "client_id": "x", "topic": "t", "rate": 1,
                   "gateway": 2}]}, "there are 2 gateways"),
    ({"clients": [{"name": "x", "program": "connection-storm", "sources": ["10.0.0.1"],
                   "rate": 1}]}, "not a loopback address"),
    ({"clients": [{"name": "x", "program": "produce", "client_id": "x", "topic": "t",
                   "rat": 1}]}, "unknown field(s) rat"),
    ({"quotas": [{"entity": {"client_id": "p"}, "quotas": {"producer_byte_rate": 0}}]}, "quotas[0]"),
])
def test_a_bad_demo_file_is_one_line_naming_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_demo(spec_data(gateways=2, **change))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_each_client_is_charged_to_the_window_kafka_would_use() -> None:
    spec = parse_demo(spec_data(gateways=2))
    configs = spec.quota_configs()
    own, other, storm = (charge_of(c, configs) for c in spec.clients)
    assert (own.entity, own.limit, own.level) == ("client_id=p", 1000, "/config/clients/p")
    # no quota of its own: the client-id default, in a window of its own, says where it comes from
    assert (other.entity, other.limit, other.level) == ("client_id=q", 500, "/config/clients/<default>")
    assert (storm.entity, storm.counter, storm.unit) == ("ip=127.0.0.9", "accepted", "conn/s")


@pytest.mark.parametrize("client", [
    DemoClient("a", "produce", "kafka-python", "app", 1, "t", 1000.0),
    DemoClient("b", "consume", "aiokafka", "etl", 0, "t"),
    DemoClient("c", "connection-storm", sources=("127.0.0.9",), rate=5),
    DemoClient("d", "topic-storm", "confluent-kafka", "admin", rate=2, partitions=3),
])
def test_client_command_lines_are_what_the_client_programs_take(client: DemoClient) -> None:
    argv = client_argv(client, "127.0.0.1:9192", 30)
    args = build_parser().parse_args(argv[3:])  # after: python -m app.clients
    assert args.kind == client.program and args.name == client.name and args.seconds == 30


class _NoDirectives(DirectiveWatcher):
    def __init__(self) -> None:
        super().__init__("", "")


def test_the_view_and_the_summary_give_the_same_rates_over_the_same_window(tmp_path: Path) -> None:
    spec = parse_demo(spec_data(gateways=2, warmup=5))
    run = DemoRun(spec, ["gw0", "gw1"], tmp_path)
    run.start = time.monotonic() - 20.5  # 20 s ran
    for client in run.clients:
        for t in range(20):
            client.record({"t": t, "bytes": 1000 if client.spec.name == "p" else 200,
                           "accepted": 3, "attempts": 9, "closed": 6})
    view = DemoView(spec, "127.0.0.1:9092", 1, ["gw0", "gw1"], True, tty=False, colour=False,
                    console="http://127.0.0.1:6066/console")
    frame = view.frame(run, _NoDirectives(), 0)
    assert "over the last 11 s (the quota window is 11 s" in frame
    assert "console http://127.0.0.1:6066/console" in frame
    assert "xLIMIT: RATE / LIMIT" in frame and "LEFT: until the throttle ends" in frame
    (p_row,) = [line for line in frame.splitlines() if line.startswith("client_id=p ")]
    assert "1.00x" in p_row and "/config/clients/p" in p_row
    summary = view.summary(run)
    assert "over the 15 s after the 5 s warm-up" in summary
    p_sum = [line for line in summary.splitlines() if line.startswith("client_id=p ")][0]
    assert "1.00x" in p_sum
    (s_sum,) = [line for line in summary.splitlines() if line.startswith("s ")]
    assert "60/180 accepted" in s_sum and "closed 120" in s_sum


def test_client_reports_land_in_the_run_seconds_they_happened(tmp_path: Path) -> None:
    client = ClientRun(DemoClient("x", "produce", client_id="x", topic="t", rate=1))
    client.started_s = 10.4  # started 10.4 s into the run
    client.record({"name": "x", "t": 0, "bytes": 5})
    client.record({"name": "x", "t": 1, "bytes": 7})
    client.record({"name": "x", "final": True, "bytes": 12})  # the totals line is not a second
    assert dict(client.seconds) == {10: {"bytes": 5}, 11: {"bytes": 7}}
    assert client.per_second("bytes", 10, 12) == 6.0 and client.totals["bytes"] == 12


def test_the_summary_says_per_entity_whether_every_minute_held(tmp_path: Path) -> None:
    """Three whole minutes after the warm-up: `p` (offers 4x its quota) is at its quota but for
    one minute at 1.5x, so it did not hold; `q` stays at its default's limit all along."""
    spec = parse_demo(spec_data(gateways=2, warmup=5))
    run = DemoRun(spec, ["gw0", "gw1"], tmp_path)
    run.start = time.monotonic() - 190.5  # 190 s ran: minutes 5-65, 65-125, 125-185
    p, q, _storm = run.clients
    for t in range(190):
        p.record({"t": t, "bytes": 1500 if 70 <= t < 130 else 1000})
        q.record({"t": t, "bytes": 500})
    view = DemoView(spec, "127.0.0.1:9092", 1, ["gw0", "gw1"], True, tty=False, colour=False)
    assert view.minutes(5, 190) == [(5, 65), (65, 125), (125, 185)]
    held = {row[0]: row for row in view.held(run, 5, 190)}
    entity, quota, low, high, over, ok = held["client_id=p"]
    assert over and not ok and low == pytest.approx(1000 / 1000) and high > 1.4
    assert held["client_id=q"][4:] == [True, True]
    summary = view.summary(run)
    assert "each entity over 3 whole minutes after the warm-up" in summary
    (p_row,) = [line for line in summary.splitlines()
                if line.startswith("client_id=p ") and line.rstrip().endswith(("yes", "NO"))]
    assert p_row.rstrip().endswith("NO")
    assert "workers' lag: not read" in summary


def test_the_workers_largest_lag_is_read_from_their_metrics(tmp_path: Path) -> None:
    page = ('# HELP quota_streams_consumer_lag_seconds ...\n'
            'quota_streams_consumer_lag_seconds{partition="0",topic="quota.events.request"} 0.0\n'
            'quota_streams_consumer_lag_seconds{partition="3",topic="quota.events.request"} 1.25\n'
            'quota_streams_consumer_lag_records{partition="3",topic="quota.events.request"} 99.0\n')
    assert largest_lag(page) == Lag(1.25, "quota.events.request/3")
    assert largest_lag("quota_streams_events_total 3.0\n") is None
    spec = parse_demo(spec_data(gateways=2, warmup=5))
    run = DemoRun(spec, ["gw0", "gw1"], tmp_path)
    run.start = time.monotonic() - 30.5
    run.lags = {2: Lag(9.0, "a/0"), 12: Lag(0.4, "b/1"), 20: Lag(0.2, "b/1")}  # t=2: warm-up
    view = DemoView(spec, "127.0.0.1:9092", 1, ["gw0", "gw1"], True, tty=False, colour=False)
    assert "largest lag after the warm-up: 0.40 s (b/1 at t=12 s" in view.summary(run)


def test_the_products_cpu_is_read_from_proc_and_summarised_after_the_warm_up(
        tmp_path: Path) -> None:
    """The summary says how many cores the workers and gateways used after the warm-up, from
    their CPU-seconds read each second; a process that is gone gives no reading."""
    import os
    import subprocess
    import sys

    from app.devstack.procstat import CpuMeter

    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
                             "while time.process_time() < end: pass\nprint('spent', flush=True)\n"
                             "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        meter = CpuMeter({"workers": [os.getpid()], "gateways": [busy.pid]})
        first = meter.sample()
        assert busy.stdout is not None and busy.stdout.readline() == "spent\n"  # 0.3 CPU-s used
        later = meter.sample()
        assert first is not None and later is not None
        assert later["gateways"] >= 0.25 and later["workers"] >= first["workers"]
    finally:
        busy.kill()
        busy.wait()
    assert meter.sample() is None  # the gateway is gone
    spec = parse_demo(spec_data(gateways=2, warmup=5))
    run = DemoRun(spec, ["gw0", "gw1"], tmp_path)
    run.start = time.monotonic() - 30.5
    run.cpu_seconds = {2: {"workers": 0.0, "gateways": 0.0},  # the warm-up: not counted
                       5: {"workers": 1.0, "gateways": 2.0},
                       25: {"workers": 3.0, "gateways": 8.0}}
    view = DemoView(spec, "127.0.0.1:9092", 1, ["gw0", "gw1"], True, tty=False, colour=False)
    summary = view.summary(run)
    assert "product CPU after the warm-up: 0.40 cores (workers 0.10, gateways 0.30;" in summary
    run.cpu_seconds = {}
    assert "product CPU: not read" in view.summary(run)


async def test_stopping_a_client_stops_the_processes_it_started(tmp_path: Path) -> None:
    """A client's children (the Java client's JVM under `python -m app.clients`) stop with it,
    even one that ignores SIGTERM."""
    import asyncio
    import os
    import sys

    from app.demo.run import stop_group

    pid_file = tmp_path / "child.pid"
    script = (f"import signal, subprocess, sys, time\n"
              f"child = subprocess.Popen([sys.executable, '-c', "
              f"'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
              f"time.sleep(60)\n")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script,
                                                start_new_session=True)
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.05)
    child = int(pid_file.read_text())
    await stop_group(proc)
    assert proc.returncode is not None
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the client's child outlived it")
