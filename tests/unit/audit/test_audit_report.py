"""Report and helpers without Spark: charts are drawn, the HTML names what it shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.audit.common import entity_candidates, parse_when
from app.contract.entities import entity_string, parse_entity_string as parse_entity
from app.explanation import format_ms
from app.audit.report import format_recommendations, write_report


def test_parse_when() -> None:
    assert parse_when("1763800000000") == 1763800000000
    assert parse_when("2025-11-22T08:26:40Z") == 1763800000000
    assert parse_when("2025-11-22T08:26:40.5") == 1763800000500  # no zone: UTC
    assert parse_when("2025-11-22T09:26:40+01:00") == 1763800000000
    assert format_ms(1763800000123) == "2025-11-22T08:26:40.123Z"
    for bad in ("", "yesterday", "-5"):
        with pytest.raises(ValueError):
            parse_when(bad)


def test_entities() -> None:
    assert entity_string({"user": "alice", "client_id": ""}) == "user=alice"
    assert entity_string({"broker": 1, "listener": "EXT"}) == "broker=1,listener=EXT"
    spec = parse_entity("user=alice, client_id=app")
    assert spec == {"user": "alice", "client_id": "app"}
    assert entity_candidates(spec) == ["user=alice,client_id=app", "user=alice", "client_id=app"]
    for bad in ("alice", "colour=red", "user=a,user=b", ""):
        with pytest.raises(ValueError):
            parse_entity(bad)


def test_write_report(tmp_path: Path) -> None:
    summary = {"input": "archive x.jsonl", "settings": {"scope": "broker"},
               "first_ts": 1763800000000, "last_ts": 1763800010000,
               "counts": {"decisions": 10, "deadletters": 0}, "headroom": 1.2,
               "tolerance": "0", "passed": False,
               "diff": {"matched": 8, "different": 1, "missing": 1, "unexpected": 0,
                        "invalid": 0, "mismatches": 2}}
    top = [{"entity": "user=alice", "quota": "producer_byte_rate", "throttled": 4,
            "throttle_ms": 5000, "directives": 2, "max_observed": 900.0, "limit": 500.0}]
    series = {"user=alice": [{"quota": "producer_byte_rate", "broker": b, "bucket": 1763800000000 + i * 1000,
                              "max_observed": 400.0 + 50 * i, "limit": 500.0}
                             for i in range(10) for b in (1, 2)]}
    diff_counts = [{"status": "matched", "quota": "producer_byte_rate", "n": 8},
                   {"status": "missing", "quota": "producer_byte_rate", "n": 1},
                   {"status": "different", "quota": "request_percentage", "n": 1}]
    recs = [{"entity": "user=alice", "quota": "producer_byte_rate", "decisions": 10, "p50": 1.0,
             "p95": 2.0, "p99": 3.0, "max": 4.0, "limit": 500.0, "config_level": "/c",
             "suggested": 4.0, "unit": "B/s"}]
    path = write_report(tmp_path, summary, top, series, diff_counts, recs,
                        [{"status": "missing", "entity": "user=alice", "quota": "q", "broker": 1,
                          "ts": 5, "fields": ""}])
    text = path.read_text()
    for name in ("top_throttled.png", "usage_0.png", "mismatches.png"):
        assert (tmp_path / name).stat().st_size > 1000
        assert name in text
    assert "FAIL" in text and "user=alice" in text and "First mismatches" in text
    table = format_recommendations(recs)
    assert "suggested" in table.splitlines()[0] and "user=alice" in table


def test_report_without_throttles_or_diff(tmp_path: Path) -> None:
    path = write_report(tmp_path, {"counts": {}, "settings": {}}, [], {}, [], [])
    assert "<em>none</em>" in path.read_text()
    assert not (tmp_path / "top_throttled.png").exists()


def test_auto_bucket() -> None:
    from app.audit.job import auto_bucket_ms

    assert auto_bucket_ms(0, 10_000, 1000) == 1000  # a 10 s audit: 1 s buckets
    assert auto_bucket_ms(0, 3_600_000, 1000) == 15_000  # an hour: 240 buckets
    assert auto_bucket_ms(0, 10_000, 5000) == 5000  # never below one quota window
    assert auto_bucket_ms(None, None, 1000) == 1000
