"""The Streams anchor's fixed limits and windows are the ones the worker applies to the
benchmark's principals, and its table reads side by side."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from app.engine.configs import parse_config_record
from app.engine.engine import EngineSettings
from app.intake.replay import Replayer

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture
def anchor(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(BENCH))
    module = importlib.import_module("bench_streams_anchor")
    yield module
    for name in ("bench_streams_anchor", "bench_pipeline"):
        sys.modules.pop(name, None)


def decisions(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The worker's engine on one event under the benchmark's configs."""
    configs = [parse_config_record({"type": "quota_config", "v": 1, "ts": 0, **c})
               for c in sys.modules["bench_pipeline"].CONFIGS]
    line = orjson.dumps({"type": "request", "v": 1, "ts": 1000, "broker": 1, **event})
    replayer = Replayer(EngineSettings(), configs)
    (result,) = replayer.feed_line(0, line) + replayer.finish()
    out: list[dict[str, Any]] = result.output["decisions"]
    return out


def test_the_worker_throttles_the_latency_load_as_the_anchor_does(anchor: ModuleType) -> None:
    # 30 MB in a fresh 11 x 1 s window is 3 MB/s over 10 s: (3 - 1) / 1 x 10,000 ms, the figure
    # the anchor's KafkaRate gives for the same event (AnchorTopologyTest)
    produce = decisions({"user": "lat3", "client_id": "c", "api": "Produce", "bytes": 30_000_000})
    byte_rate = [d for d in produce if d["quota"] == "producer_byte_rate"]
    assert [(d["entity"], d["limit"], d["window_ms"], d["throttle_time_ms"]) for d in byte_rate] == [
        ({"user": "lat3", "client_id": "c"}, anchor.PRODUCER_LIMIT, 10_000, 20_000)]


def test_fetch_bytes_count_per_user_against_the_anchors_consumer_limit(anchor: ModuleType) -> None:
    fetch = decisions({"user": "u7", "client_id": "c7", "api": "Fetch", "bytes": 80_000_000})
    byte_rate = [d for d in fetch if d["quota"] == "consumer_byte_rate"]
    assert [(d["entity"], d["limit"]) for d in byte_rate] == [
        ({"user": "u7", "client_id": ""}, anchor.CONSUMER_LIMIT)]


def test_the_table_puts_both_systems_side_by_side_with_units(anchor: ModuleType) -> None:
    def system(p50: float, last_quarter: float) -> dict[str, float]:
        return {"samples_per_s": 123_456.0, "samples_per_cpu_s": 150_000.0, "p50_ms": p50,
                "p99_ms": 90.0, "last_quarter_p50_ms": last_quarter, "outputs": 9_000}

    lines = anchor.table({"rate": 20_000, "latency_seconds": 10, "worker": system(40, 41),
                          "anchor": system(20, 400)})
    assert lines[0].split()[:4] == ["measure", "worker", "Streams", "anchor"]
    row = next(line for line in lines if line.startswith("event -> output p50 ms @ 20,000/s"))
    assert row.split()[7:9] == ["40", "20"] and "output append time - event ts" in row
    assert lines[-1] == "the Streams anchor fell behind 20,000/s (latency kept growing)"
    assert not any("the worker fell behind" in line for line in lines)
