"""The compiled modules (engine and pipeline loops) are the build under test, and decide
exactly as their source does."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from app.admin.routing import route_line
from app.audit.synth import CONFIGS, scenario
from app.engine.configs import PRODUCE, QuotaConfigs, parse_config_record
from app.engine.engine import EngineSettings
from app.engine.stats import Rate, TokenBucket
from app.engine_build import MODULES, compiled_modules
from app.intake.replay import replay
from tests.unit import pipeline_path

#: Runs the replay with every compiled module loaded from its .py source, never an extension.
INTERPRETED = textwrap.dedent("""
    import importlib.util, json, sys

    from app.engine_build import MODULES, source

    class SourceFirst:
        def find_spec(self, name, path=None, target=None):
            if name in MODULES:
                return importlib.util.spec_from_file_location(name, source(name))
            return None

    sys.meta_path.insert(0, SourceFirst())
    from app.engine_build import compiled_modules
    from app.intake.replay import replay

    assert compiled_modules() == [], compiled_modules()
    mode, scope = sys.argv[1:3]
    lines = [bytes.fromhex(line.decode()) for line in sys.stdin.buffer.read().splitlines()]
    sys.path.insert(0, sys.argv[3])
    import pipeline_path
    if mode == "pipeline":
        print(json.dumps(pipeline_path.run(lines, scope)))
    for result in replay(lines, pipeline_path.settings(scope)) if mode == "replay" else ():
        print(json.dumps([result.output, result.directives]))
""")


def interpreted(mode: str, scope: str, lines: list[bytes]) -> list[str]:
    """The INTERPRETED run's output lines (input lines hex-encoded: columnar ones are binary)."""
    done = subprocess.run(
        [sys.executable, "-c", INTERPRETED, mode, scope, str(Path(pipeline_path.__file__).parent)],
        input=b"\n".join(line.hex().encode() for line in lines), capture_output=True,
        check=True,
    )
    return done.stdout.decode().splitlines()


def test_engine_is_compiled_unless_the_build_opted_out() -> None:
    if os.environ.get("QS_COMPILE") == "0":
        assert compiled_modules() == []
    else:
        assert compiled_modules() == list(MODULES), "reinstall with a C compiler: pip install -e ."


@pytest.mark.parametrize("scope", ["broker", "cluster", "allocations"])
def test_compiled_and_interpreted_engines_give_identical_output(scope: str) -> None:
    records = CONFIGS + scenario(seed=7, seconds=20)
    lines = [orjson.dumps(r) for r in records]
    here = [json.dumps([r.output, r.directives])
            for r in replay(lines, pipeline_path.settings(scope))]
    there = interpreted("replay", scope, lines)
    assert len(here) == len(records)
    assert sum(1 for line in here if '"throttle"' in line) > 10  # the scenario does throttle
    if scope == "allocations":  # allocations with trims, saturated by reported throttles
        assert sum(1 for line in here if '"kind": "allocation"' in line) > 10
    assert there == here


@pytest.mark.parametrize("fmt", ["json", "columnar"])
@pytest.mark.parametrize("scope", ["broker", "cluster", "allocations"])
def test_compiled_and_interpreted_pipeline_loops_give_identical_output(scope: str, fmt: str) -> None:
    """The intake, ingest, internal codec and aggregate loops are compiled too
    (app/engine_build.py), for JSON and columnar source records."""
    records = CONFIGS + scenario(seed=11, seconds=20)
    lines = [orjson.dumps(r) for r in records]
    if fmt == "columnar":
        lines = [o.value for line in lines for o in route_line(line, columnar=True).records]
        assert sum(line.startswith(b"QSCB") for line in lines) > 100
    here = pipeline_path.run(lines, scope)
    assert sum(len(entry[2]) for entry in here if len(entry) == 3) > 10  # directives were sent
    assert interpreted("pipeline", scope, lines) == [json.dumps(here)]


def test_settings_and_configs_survive_pickling() -> None:
    """Spark ships these to its Python workers; compiled frozen dataclasses must round-trip."""
    settings = EngineSettings(scope="cluster", accounting="served", window_num=5, min_extension_ms=7)
    assert pickle.loads(pickle.dumps(settings)) == settings
    update = parse_config_record({"type": "quota_config", "v": 1, "ts": 3, "entity": {"user": "a"},
                                  "quotas": {"producer_byte_rate": 5, "request_percentage": None}})
    assert pickle.loads(pickle.dumps(update)) == update
    configs = QuotaConfigs()
    configs.apply(update)
    back = pickle.loads(pickle.dumps(configs))
    assert back.resolve(PRODUCE, "a", "c") == configs.resolve(PRODUCE, "a", "c")
    assert back.resolve(PRODUCE, "a", "c").limit == 5.0


def test_states_survive_pickling() -> None:
    rate = Rate()
    rate.record(5.0, 1000, 11, 1000)
    rate.record(2.5, 2500, 11, 1000)
    back = pickle.loads(pickle.dumps(rate))
    assert (back.samples(), back.current) == ([(5.0, 1000, 1000), (2.5, 2500, 2500)], 1)
    bucket = TokenBucket(3.5, 70)
    bucket.record(1.0, 90, 1.0, 10.0)
    again = pickle.loads(pickle.dumps(bucket))
    assert (again.tokens, again.last, again.clock) == (bucket.tokens, 90, 70)
