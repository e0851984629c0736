"""Pure planning of the Spark Kafka source: no JVM, no broker.

The planner decides which offsets each Spark task reads; if it overlaps or leaves holes, the
audit double-counts or misses records silently. So these tests check coverage exactly.
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.kafka.spark_source.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    cap_offsets,
    offsets_from_json,
    offsets_to_json,
    parse_offsets,
    plan_partitions,
    resolve_ranges,
)
from app.kafka.spark_source.options import KafkaSourceOptions


def covered(plan: list[OffsetRange]) -> dict[tuple[str, int], list[int]]:
    out: dict[tuple[str, int], list[int]] = {}
    for part in plan:
        out.setdefault((part.topic, part.partition), []).extend(range(part.start, part.end))
    return out


# -- plan_partitions ---------------------------------------------------------------------------


def test_small_ranges_are_one_partition_each() -> None:
    plan = plan_partitions({("t", 1): (5, 10), ("t", 0): (0, 3)}, 100)
    assert plan == [OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 5, 10)]


def test_large_range_is_split_into_balanced_chunks() -> None:
    plan = plan_partitions({("t", 0): (100, 110)}, 4)
    assert [(p.start, p.end) for p in plan] == [(100, 104), (104, 107), (107, 110)]
    assert max(p.count for p in plan) - min(p.count for p in plan) <= 1


def test_exact_multiple_gives_full_chunks() -> None:
    plan = plan_partitions({("t", 0): (0, 12)}, 4)
    assert [p.count for p in plan] == [4, 4, 4]


def test_empty_and_inverted_ranges_plan_nothing() -> None:
    assert plan_partitions({("t", 0): (7, 7), ("t", 1): (9, 3)}, 10) == []
    assert plan_partitions({}, 10) == []


def test_order_is_deterministic() -> None:
    ranges = {("b", 0): (0, 2), ("a", 1): (0, 2), ("a", 0): (0, 2)}
    plan = plan_partitions(ranges, 1)
    assert [(p.topic, p.partition, p.start) for p in plan] == sorted(
        (p.topic, p.partition, p.start) for p in plan
    )


def test_invalid_chunk_size_and_unresolved_offsets_are_rejected() -> None:
    with pytest.raises(ValueError):
        plan_partitions({("t", 0): (0, 1)}, 0)
    with pytest.raises(ValueError, match="unresolved"):
        plan_partitions({("t", 0): (0, LATEST)}, 10)


def test_partitions_pickle() -> None:
    part = OffsetRange("quota.events.request", 3, 10, 20)
    assert pickle.loads(pickle.dumps(part)) == part


@given(
    st.dictionaries(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5)),
        st.tuples(st.integers(0, 500), st.integers(0, 500)),
        max_size=6,
    ),
    st.integers(1, 60),
)
def test_every_offset_is_planned_exactly_once(
    ranges: dict[tuple[str, int], tuple[int, int]], chunk: int
) -> None:
    plan = plan_partitions(ranges, chunk)
    assert all(0 < p.count <= chunk for p in plan)
    got = covered(plan)
    for tp, (start, end) in ranges.items():
        assert sorted(got.get(tp, [])) == list(range(start, end))  # no hole, no overlap
    assert set(got) <= set(ranges)


# -- parse_offsets / resolve_ranges --------------------------------------------------------


def test_parse_keywords_and_default() -> None:
    assert parse_offsets(None, default="earliest") == "earliest"
    assert parse_offsets("  ", default="latest") == "latest"
    assert parse_offsets("LATEST", default="earliest") == "latest"


def test_parse_spark_json() -> None:
    spec = parse_offsets('{"t": {"0": 42, "1": -2, "2": -1}}', default="earliest")
    assert spec == {("t", 0): 42, ("t", 1): EARLIEST, ("t", 2): LATEST}


@pytest.mark.parametrize(
    "raw", ["soon", "[1, 2]", '{"t": 5}', '{"t": {"x": 1}}', '{"t": {"0": "1"}}', '{"t": {"0": -3}}']
)
def test_parse_rejects_garbage(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_offsets(raw, default="earliest")


EARLY = {("t", 0): 0, ("t", 1): 100, ("t", 2): 0}
LATE = {("t", 0): 1118, ("t", 1): 150, ("t", 2): 0}  # partition 2 is empty


def test_resolve_default_reads_everything() -> None:
    assert resolve_ranges(EARLY, LATE) == {("t", 0): (0, 1118), ("t", 1): (100, 150), ("t", 2): (0, 0)}


def test_resolve_json_bounds_and_missing_partitions() -> None:
    ranges = resolve_ranges(
        EARLY, LATE, {("t", 0): 1000, ("t", 1): EARLIEST}, {("t", 0): 1100, ("t", 1): 120}
    )
    assert ranges == {("t", 0): (1000, 1100), ("t", 1): (100, 120), ("t", 2): (0, 0)}


def test_resolve_clamps_end_to_high_watermark_and_start_to_end() -> None:
    ranges = resolve_ranges(EARLY, LATE, {("t", 0): 5000}, {("t", 0): 9999})
    assert ranges[("t", 0)] == (1118, 1118)


def test_resolve_latest_start_is_empty() -> None:
    assert all(s == e for s, e in resolve_ranges(EARLY, LATE, "latest", "latest").values())


def test_resolve_start_below_log_start_is_data_loss() -> None:
    with pytest.raises(ValueError, match="below the log start"):
        resolve_ranges(EARLY, LATE, {("t", 1): 10})
    ranges = resolve_ranges(EARLY, LATE, {("t", 1): 10}, fail_on_data_loss=False)
    assert ranges[("t", 1)] == (100, 150)


def test_resolve_rejects_unknown_partitions() -> None:
    with pytest.raises(ValueError, match="t/7"):
        resolve_ranges(EARLY, LATE, {("t", 7): 0})


# -- streaming helpers ---------------------------------------------------------------------


def test_cap_offsets_without_limit_is_latest() -> None:
    assert cap_offsets({("t", 0): 3}, {("t", 0): 10, ("t", 1): 4}, None) == {("t", 0): 10, ("t", 1): 4}


def test_cap_offsets_shares_fairly_and_respects_limit() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 50}
    latest = {("t", 0): 1000, ("t", 1): 2, ("t", 2): 50}
    end = cap_offsets(start, latest, 10)
    assert sum(end[tp] - start[tp] for tp in start) == 10
    assert end == {("t", 0): 8, ("t", 1): 2, ("t", 2): 50}


@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), min_size=1, max_size=5),
    st.integers(0, 300),
)
def test_cap_offsets_never_exceeds_budget_or_latest(pairs: list[tuple[int, int]], budget: int) -> None:
    start = {("t", i): min(a, b) for i, (a, b) in enumerate(pairs)}
    latest = {("t", i): max(a, b) for i, (a, b) in enumerate(pairs)}
    end = cap_offsets(start, latest, budget)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)
    backlog = sum(latest[tp] - start[tp] for tp in start)
    assert sum(end[tp] - start[tp] for tp in start) == min(budget, backlog)


def test_offsets_json_round_trip() -> None:
    offsets = {("a", 0): 5, ("a", 10): 7, ("b.c", 2): 0}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"0": 5, "10": 7}, "b.c": {"2": 0}}
    assert offsets_from_json(as_json) == offsets


# -- options -------------------------------------------------------------------------------


def test_options_parse_and_aliases() -> None:
    opts = KafkaSourceOptions.from_options(
        {
            "bootstrap": "127.0.0.1:9092",
            "topics": " a, b ,",
            "startingOffsets": '{"a": {"0": 3}}',
            "max_records_per_partition": "1000",
            "start_ts_ms": "10",
            "end_ts_ms": "20",
            "kafka.fetch.max.wait.ms": "50",
        }
    )
    assert opts.topics == ("a", "b")
    assert opts.starting == {("a", 0): 3}
    assert opts.ending == "latest"
    assert opts.max_records_per_partition == 1000
    assert (opts.start_ts_ms, opts.end_ts_ms) == (10, 20)
    assert opts.consumer_config == {"fetch_max_wait_ms": 50}
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_stream_defaults_to_latest() -> None:
    opts = KafkaSourceOptions.from_options({"bootstrap": "h:1", "topics": "a"}, streaming=True)
    assert opts.starting == "latest"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"topics": "a"}, "bootstrap"),
        ({"bootstrap": "h:1"}, "topics"),
        ({"bootstrap": "h:1", "topics": "a", "starting_offsets": "x"}, "starting_offsets"),
        ({"bootstrap": "h:1", "topics": "a", "ending_offsets": '{"b": {"0": 1}}'}, "not in option topics"),
        ({"bootstrap": "h:1", "topics": "a", "max_records_per_partition": "0"}, "max_records"),
        ({"bootstrap": "h:1", "topics": "a", "start_ts_ms": "9", "end_ts_ms": "3"}, "end_ts_ms"),
        ({"bootstrap": "h:1", "topics": "a", "fail_on_data_loss": "maybe"}, "fail_on_data_loss"),
    ],
)
def test_options_errors_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaSourceOptions.from_options(options)
