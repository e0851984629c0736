"""Percentiles, the suggested-quota rule, and the recommendations from merged sketches."""

from __future__ import annotations

import marshal
import math

import numpy as np
import pytest

from app.audit.common import nice_ceil
from app.contract.entities import entity_string
from app.audit.recommend import finish, limit_text, merge_sketches, percentiles, suggest
from app.audit.results import SKETCH_FIELDS
from app.audit.summaries import Summaries
from app.engine import configs as cfg
from app.engine.engine import Decision

ALICE = {"user": "a"}
OPS = {"user": "ops"}


def test_percentiles_match_numpy_linear() -> None:
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0, 5.0]
    assert percentiles(values) == pytest.approx(list(np.percentile(values, [50, 95, 99])))
    assert percentiles([7.0]) == [7.0, 7.0, 7.0]
    assert all(math.isnan(x) for x in percentiles([]))


def test_nice_ceil_and_suggest() -> None:
    assert nice_ceil(1_234_567) == 1_300_000
    assert nice_ceil(0.0123) == 0.013
    assert nice_ceil(500) == 500
    assert suggest(1_000_000, "producer_byte_rate") == 1_200_000  # p99 x 1.2
    assert suggest(10_001, "producer_byte_rate") == 13_000
    assert suggest(3.3, "request_percentage") == 4.0
    assert suggest(0.001, "request_percentage") == 0.01
    assert suggest(0.2, "connection_creation_rate") == 1  # integral types: at least 1
    assert suggest(0.0, "producer_byte_rate") is None
    assert suggest(100, "producer_byte_rate", headroom=2.0) == 200


def test_merged_sketches_and_finish() -> None:
    produce = [Decision(cfg.PRODUCE, ALICE, 10 if t > 50 else 0, "none", float(t), 50.0, 1000,
                        "/x", "p", t, 1) for t in range(1, 101)]
    # mutations: the rate is partitions over the controller window span, not the token balance
    mutations = [Decision(cfg.MUTATION, OPS, 0, "none", -5.0, 2.0, 1000, "/y", "m", 1000 * i, 1)
                 for i in range(20)]
    summaries = Summaries(1000, 11_000, entity_string)
    for d in produce:
        summaries.add((1.0, 0.0, 0.0, 1.0), [d], [])
    for d in mutations:
        summaries.add((0.0, 0.0, 10.0, 1.0), [d], [])
    _, sketches = summaries.flush(final=True)
    rows = merge_sketches({**dict(zip(SKETCH_FIELDS, r)), "sketch": marshal.dumps(r[-1])}
                          for r in sketches)
    by = {r["quota"]: r for r in rows}
    p = by[cfg.PRODUCE]
    assert (p["decisions"], p["max"], p["throttled"], p["limit"]) == (100, 100.0, 50, 50.0)
    assert p["p50"] == pytest.approx(50.5, rel=0.005) and p["p99"] == pytest.approx(99.01, rel=0.005)
    m = by[cfg.MUTATION]
    assert m["max"] == pytest.approx(11 * 10 / 11.0)  # 11 mutations of 10 within 11 s
    done = finish(rows, 1.2)
    assert done[0]["quota"] == cfg.PRODUCE  # most throttled first
    assert done[0]["suggested"] == 120 and done[0]["vs_limit"] == pytest.approx(2.4)
    assert limit_text(2147483647.0) == "unlimited" and limit_text(5.0) == "5"
