"""The directive comparator (pure, and its Arrow adapter), tolerance parsing."""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest

from app.audit.diff import (
    compare,
    diff_function,
    differing_fields,
    mismatches,
    parse_directive,
    parse_tolerance,
    side_rows_function,
    summarize,
    within_tolerance,
)


def directive(ts: int, throttle: int = 100, quota: str = "producer_byte_rate",
              entity: dict[str, Any] | None = None, broker: int | None = 1) -> dict[str, Any]:
    return {"v": 1, "ts": ts, "scope": "broker" if broker is not None else "cluster",
            "broker": broker, "entity": entity or {"user": "alice", "client_id": ""},
            "quota": quota, "action": "throttle", "throttle_time_ms": throttle,
            "until": ts + throttle, "observed": 600.5, "limit": 500.0, "window_ms": 10500,
            "config_level": "/config/users/alice"}


def test_statuses_and_fields() -> None:
    exp = [directive(1), directive(2), directive(3), directive(4, quota="request_percentage")]
    changed = directive(2, throttle=150)
    act = [directive(1), changed, directive(9), directive(4, quota="request_percentage")]
    rows = compare([orjson.dumps(d) for d in exp], [orjson.dumps(d) for d in act] + [b"{x"])
    by = {(r.status, r.ts) for r in rows}
    assert by == {("matched", 1), ("different", 2), ("missing", 3), ("unexpected", 9),
                  ("matched", 4), ("invalid", None)}
    diff = next(r for r in rows if r.status == "different")
    assert diff.fields == ["throttle_time_ms", "until"]
    assert diff.entity == "user=alice" and diff.quota == "producer_byte_rate"
    counts = summarize(rows)
    assert counts == {"matched": 2, "different": 1, "missing": 1, "unexpected": 1,
                      "duplicate": 0, "invalid": 1}
    assert mismatches(counts) == 4


def test_republished_copies_are_duplicates_not_mismatches() -> None:
    """At-least-once: a failover re-publishes directives; identical copies are not faults."""
    exp = [directive(1), directive(2), directive(2, throttle=300)]
    act = [directive(1), directive(1), directive(2), directive(2), directive(2, throttle=300),
           directive(2, throttle=300), directive(2, throttle=999)]
    rows = compare(exp, act)
    got = sorted((r.status, r.ts) for r in rows)
    assert got == [("duplicate", 1), ("duplicate", 2), ("duplicate", 2), ("matched", 1),
                   ("matched", 2), ("matched", 2), ("unexpected", 2)]
    assert mismatches(summarize(rows)) == 1


def test_same_ts_pairs_in_order_and_groups_are_separate() -> None:
    exp = [directive(5, 10), directive(5, 20), directive(5, 10, broker=2)]
    act = [directive(5, 10), directive(5, 20, broker=2)]
    rows = compare(exp, act)
    assert sorted((r.status, r.broker) for r in rows) == [
        ("different", 2), ("matched", 1), ("missing", 1)]


def test_values_compare_by_json_value_extra_fields_count() -> None:
    a = directive(1)
    b = {**a, "limit": 500, "note": "x"}
    assert differing_fields(a, b) == ["note"]
    assert differing_fields(a, {**a, "observed": 600.5000000000001}) == ["observed"]


def test_parse_directive_rejects_non_directives() -> None:
    assert parse_directive(b"[1]")[1] == "not a JSON object"
    assert parse_directive(b'{"ts": "x"}')[1] == "ts missing or not an integer"
    assert parse_directive(orjson.dumps({**directive(1), "broker": "1"}))[1].startswith("broker")
    assert parse_directive(orjson.dumps(directive(1)))[0] == directive(1)


def test_tolerance() -> None:
    counts = {"matched": 990, "different": 5, "missing": 5, "unexpected": 0, "invalid": 0}
    assert parse_tolerance("10") == (10.0, False)
    assert within_tolerance(counts, parse_tolerance("10"))
    assert not within_tolerance(counts, parse_tolerance("9"))
    assert within_tolerance(counts, parse_tolerance("1%"))
    assert not within_tolerance(counts, parse_tolerance("0.5%"))
    for bad in ("x", "-1", "%"):
        with pytest.raises(ValueError):
            parse_tolerance(bad)


def test_arrow_adapter_equals_the_pure_comparator() -> None:
    """What Spark runs: parse both sides, sort by group/ts, compare across batch borders."""
    exp = [directive(t, throttle=t % 7 + 1, broker=t % 2 + 1) for t in range(40)]
    act = [directive(t, throttle=t % 7 + (2 if t == 13 else 1), broker=t % 2 + 1)
           for t in range(40) if t != 7] + [directive(99)]
    sides = []
    for side, items in (("e", exp), ("a", act)):
        batch = pa.record_batch({"partition": [0] * len(items), "offset": list(range(len(items))),
                                 "value": [orjson.dumps(d) for d in items]})
        for b in side_rows_function(side)(iter([batch])):
            sides.extend(b.to_pylist())
    sides.sort(key=lambda r: (r["scope"], r["broker"], r["entity"], r["quota"], r["ts"],
                              r["side"], r["k1"], r["k2"], r["k3"]))
    table = pa.Table.from_pylist(sides)
    out = [r for b in diff_function()(iter(table.to_batches(max_chunksize=7))) for r in b.to_pylist()]
    pure = [r.as_dict() for r in compare(exp, act)]
    assert sorted((r["status"], r["broker"], r["ts"], tuple(r["fields"])) for r in out) == \
        sorted((r["status"], r["broker"], r["ts"], tuple(r["fields"])) for r in pure)
    assert summarize_rows(out) == {"matched": 38, "different": 1, "missing": 1, "unexpected": 1}


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return out
