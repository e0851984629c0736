"""Step 2's summaries (the audit's default output) equal what the per-decision rows give.

The references here are the straightforward computations over decision rows that the audit
ran in Spark before the summaries: group-by sums per time bucket, and exact percentiles of the
usage rate at each decision.
"""

from __future__ import annotations

import bisect
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.audit import synth
from app.contract.entities import entity_string
from app.audit.recommend import merge_sketches, percentiles
from app.audit.explode import ExplodeContext, explode_function
from app.audit.recompute import MODE_FILE, archive_configs, exploded_schema
from app.audit.run import RunContext, Runner
from app.audit.results import USAGE_FIELDS, ResultRows
from app.audit.summaries import SKETCH_ALPHA, Sketch, Summaries
from app.engine import configs as cfg
from app.engine.engine import EngineSettings
from tests.unit.audit.test_audit_recompute import file_run, lines_of

SETTINGS = EngineSettings(scope="broker")
SPAN_MS = SETTINGS.controller_window_num * SETTINGS.controller_window_ms
SUMS = ("decisions", "amount", "sum_observed", "throttled", "throttle_ms", "directives")


def reference_usage(decisions: list[dict[str, Any]], bucket_ms: int
                    ) -> dict[tuple[Any, ...], dict[str, Any]]:
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for d in decisions:
        key = (d["entity"], d["quota"], d["broker"], d["ts"] // bucket_ms * bucket_ms)
        c = out.setdefault(key, {"decisions": 0, "amount": 0.0, "sum_observed": 0.0,
                                 "max_observed": -math.inf, "limit": -math.inf, "throttled": 0,
                                 "throttle_ms": 0, "directives": 0, "first_ts": d["ts"],
                                 "last_ts": d["ts"]})
        c["decisions"] += 1
        c["amount"] += d["amount"]
        c["sum_observed"] += d["observed"]
        c["max_observed"] = max(c["max_observed"], d["observed"])
        c["limit"] = max(c["limit"], d["limit"])
        c["throttled"] += d["throttle_time_ms"] > 0
        c["throttle_ms"] += d["throttle_time_ms"]
        c["directives"] += d["directive"] is not None
        c["first_ts"] = min(c["first_ts"], d["ts"])
        c["last_ts"] = max(c["last_ts"], d["ts"])
    return out


def rolled_up(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Usage rows of one (window, bucket) from several flushes added up, as Spark does."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = (r["entity"], r["quota"], r["broker"], r["bucket"])
        c = out.get(key)
        if c is None:
            out[key] = {k: r[k] for k in USAGE_FIELDS[4:]}
            continue
        for k in SUMS:
            c[k] += r[k]
        c["max_observed"] = max(c["max_observed"], r["max_observed"])
        c["limit"] = max(c["limit"], r["limit"])
        c["first_ts"] = min(c["first_ts"], r["first_ts"])
        c["last_ts"] = max(c["last_ts"], r["last_ts"])
    return out


def exact_rates(decisions: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """The usage rate at each decision: `observed`, or partitions mutated over the last
    controller span per second for mutations (per entity and broker)."""
    rates: dict[tuple[str, str], list[float]] = {}
    mutations: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for d in decisions:
        if d["quota"] == cfg.MUTATION:
            mutations.setdefault((d["entity"], d["broker"]), []).append(d)
        else:
            rates.setdefault((d["entity"], d["quota"]), []).append(d["observed"])
    for (entity, _), ds in mutations.items():
        ds.sort(key=lambda d: d["ts"])
        times = [d["ts"] for d in ds]
        for d in ds:
            lo = bisect.bisect_left(times, d["ts"] - (SPAN_MS - 1))
            hi = bisect.bisect_right(times, d["ts"])
            total = sum(x["amount"] for x in ds[lo:hi])
            rates.setdefault((entity, cfg.MUTATION), []).append(total / (SPAN_MS / 1000.0))
    return rates


def close(got: float, want: float) -> bool:
    return abs(got - want) <= SKETCH_ALPHA * abs(want) + 1e-12


@pytest.fixture(scope="module")
def scenario() -> tuple[list[bytes], Any]:
    lines = lines_of(synth.CONFIGS + synth.scenario(seed=5, seconds=8))
    return lines, file_run(lines)


def test_usage_cells_equal_the_decisions_grouped_by_bucket(scenario) -> None:  # type: ignore[no-untyped-def]
    _, result = scenario
    decisions = result.decisions()
    assert {d["quota"] for d in decisions} >= {cfg.PRODUCE, cfg.FETCH, cfg.REQUEST, cfg.MUTATION}
    want = reference_usage(decisions, 1000)
    got = rolled_up(result.rows("usage"))
    assert got.keys() == want.keys()
    for key, cell in want.items():
        assert got[key] == pytest.approx(cell), key
    assert sum(c["directives"] for c in got.values()) == len(result.directives()) > 0


def test_recommendations_from_sketches_are_within_alpha_of_the_exact_ones(scenario) -> None:  # type: ignore[no-untyped-def]
    _, result = scenario
    decisions = result.decisions()
    merged = {(r["entity"], r["quota"]): r for r in merge_sketches(result.rows("sketch"))}
    rates = exact_rates(decisions)
    assert merged.keys() == rates.keys()
    for key, values in rates.items():
        row = merged[key]
        for got, want in zip((row["p50"], row["p95"], row["p99"]), percentiles(values)):
            assert close(got, want), (key, got, want)
        assert row["max"] == max(values)
        mine = [d for d in decisions if (d["entity"], d["quota"]) == key]
        assert row["decisions"] == len(mine)
        assert row["throttled"] == sum(d["throttle_time_ms"] > 0 for d in mine)
        latest = max(d["ts"] for d in mine)
        assert row["limit"] in {d["limit"] for d in mine if d["ts"] == latest}


def test_flushing_often_gives_rows_that_merge_to_the_same_summaries(scenario) -> None:  # type: ignore[no-untyped-def]
    lines, result = scenario
    configs = tuple(archive_configs(lines)[0])
    ctx = ExplodeContext(SETTINGS, MODE_FILE, configs, {"f": 0})
    batch = pa.record_batch({"file": ["f"] * len(lines), "offset": list(range(len(lines))),
                             "value": lines})
    slices = (batch.slice(k, 20) for k in range(0, len(lines), 20))
    chunks = explode_function(ctx, batch_rows=40)(slices)  # many small chunks
    table = pa.Table.from_batches(list(chunks), exploded_schema())
    table = table.sort_by([("t", "ascending"), ("s", "ascending"), ("pos", "ascending"),
                           ("i", "ascending")])
    runner = Runner(RunContext(SETTINGS, configs))
    out = ResultRows(every_decision=False,
                     summaries=Summaries(1000, SPAN_MS, entity_string, max_cells=3))
    rows: list[dict[str, Any]] = []
    for part in table.to_batches(max_chunksize=5):
        runner.run_batch(part, out)
        for b in out.to_batches():
            rows.extend(b.to_pylist())
    runner.finish(out)
    for b in out.to_batches(final=True):
        rows.extend(b.to_pylist())
    kinds = {r["kind"] for r in rows}
    assert kinds == {"directive", "usage", "sketch"}  # no decision rows by default
    usage = [r for r in rows if r["kind"] == "usage"]
    assert len(usage) > len(result.rows("usage"))  # it did flush partial cells
    got, want = rolled_up(usage), rolled_up(result.rows("usage"))
    assert got.keys() == want.keys()
    for key, cell in want.items():
        assert got[key] == pytest.approx(cell), key
    merged = merge_sketches(r for r in rows if r["kind"] == "sketch")
    assert [pytest.approx(r) for r in merged] == merge_sketches(result.rows("sketch"))


def test_report_bounds_apply_to_the_summaries(scenario) -> None:  # type: ignore[no-untyped-def]
    _, result = scenario
    ts = sorted(d["ts"] for d in result.decisions())
    lo, hi = ts[len(ts) // 3], ts[2 * len(ts) // 3]
    summaries = Summaries(1000, SPAN_MS, entity_string, lo, hi)
    from app.engine.engine import Decision

    inside = Decision(cfg.PRODUCE, {"user": "a"}, 0, "none", 5.0, 9.0, 1000, None, "k", lo, 1)
    outside = Decision(cfg.PRODUCE, {"user": "a"}, 0, "none", 7.0, 9.0, 1000, None, "k", hi, 1)
    summaries.add((10.0, 0.0, 0.0, 1.0), [inside, outside], [])
    usage, sketches = summaries.flush(final=True)
    assert [(u[3], u[4], u[5]) for u in usage] == [(lo - lo % 1000, 1, 10.0)]
    assert sketches[0][3] == 1 and sketches[0][8] == 5.0


rates = st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e12)), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(rates, rates)
def test_sketch_percentiles_are_within_alpha_and_merge_like_the_union(a: list[float],
                                                                      b: list[float]) -> None:
    one, two, both = Sketch(), Sketch(), Sketch()
    for v in a:
        one.add(v)
        both.add(v)
    for v in b:
        two.add(v)
        both.add(v)
    one.merge(two)
    assert one.state() == both.state() and one.count == len(a) + len(b)
    qs = [0.0, 0.5, 0.95, 0.99, 1.0]
    for got, want in zip(one.percentiles(qs), percentiles(a + b, qs)):
        assert close(got, want), (got, want)
    assert Sketch.from_state(one.state()).percentiles(qs) == one.percentiles(qs)
