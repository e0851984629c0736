"""bench_broker_plugin's table: the figures the JVM measured, with the ratio and the shares."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from app.errors import UserError


def load_bench() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "bench" / "bench_broker_plugin.py"
    spec = importlib.util.spec_from_file_location("bench_broker_plugin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_broker_plugin = load_bench()

MEASURED = {"clients": 10000, "requests": 2000000, "rounds": 5, "kafka_ns": 300.0,
            "plugin_ns": 480.0, "plugin_tags_ns": 40.0, "reporter_cpu_us": 25000,
            "reporter_bytes": 1300000, "reporter_events": 10000}


def test_the_table_shows_the_extra_time_per_request_and_the_reporters_share_of_a_core() -> None:
    table = bench_broker_plugin.report(MEASURED)
    assert "(+180 ns, 1.60x)" in table
    assert "25.0 ms   (2.5% of a core)" in table
    assert "(130 B each)" in table and "1.30 MB" in table
    assert " 40   (quotaMetricTags" in table


def test_an_unbuilt_plugin_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_broker_plugin, "PLUGIN", tmp_path)
    with pytest.raises(UserError, match="make setup"):
        bench_broker_plugin.classpath()
