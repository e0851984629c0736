"""What a worker keeps for the console: a bounded history of the busiest and the opened
windows, what it published while in force, and nothing of windows it no longer holds."""

from __future__ import annotations

import math

from app.console.index import HISTORY_S, MARKS_KEPT, ConsoleIndex, History
from app.contract.entities import entity_string
from tests.unit.console.engine_windows import T0, USERS, windows


def test_history_keeps_at_most_its_capacity_pinned_first() -> None:
    history = History(capacity=3)
    history.pin("opened", 100)
    history.choose(["a", "b", "c", "d"], 100)
    assert list(history.series) == ["opened", "a", "b"]
    history.choose(["d", "a"], 200)
    assert set(history.series) == {"opened", "d", "a"}
    history.choose(["d", "a", "b"], 100 + HISTORY_S + 1)  # the pin ran out
    assert set(history.series) == {"d", "a", "b"}
    none = History(capacity=0)
    none.pin("x", 1)
    none.choose(["a"], 1)
    assert not none.series and not none.pinned


def test_an_opened_window_is_charted_at_once_in_place_of_an_unpinned_one() -> None:
    history = History(capacity=2)
    history.choose(["a", "b"], 10)
    history.pin("opened", 10)
    assert "opened" in history.series and len(history.series) == 2


def test_history_reads_a_point_a_second_with_gaps_as_no_reading() -> None:
    history = History(capacity=1)
    history.choose(["w"], 1000)
    values = {1000: 5.0, 1001: 7.0, 1004: 9.0}
    for second, rate in values.items():
        history.record(second, lambda key: (rate, 10.0, {1: rate / 2, 2: rate / 2}))
    points = history.series["w"].points(1004, seconds=5)
    assert points["start_s"] == 1000
    assert points["total"] == [5.0, 7.0, None, None, 9.0]
    assert points["limit"] == [10.0, 10.0, None, None, 10.0]
    assert points["parts"]["1"] == [2.5, 3.5, None, None, 4.5]
    history.record(1005, lambda key: None)  # the window is gone
    assert not history.series


def test_a_ring_older_than_the_history_reads_nothing_stale() -> None:
    history = History(capacity=1)
    history.choose(["w"], 0)
    history.record(10, lambda key: (1.0, None, {}))
    history.record(10 + HISTORY_S, lambda key: (2.0, None, {}))
    total = history.series["w"].points(10 + HISTORY_S)["total"]
    assert total[-1] == 2.0 and all(v is None for v in total[:-1])
    assert not any(isinstance(v, float) and math.isnan(v) for v in total)


def test_published_records_are_shown_while_in_force_and_marked_when_charted() -> None:
    _, index, published = windows()
    directive = published[-1]
    label = entity_string(directive["entity"])
    assert index.in_force(directive["quota"], label, directive["until"] - 1) is not None
    assert index.in_force(directive["quota"], label, directive["until"]) is None
    key = next(k for _, k, c in index.items()
               if c.quota == directive["quota"] and index.label(k, c) == label)
    index.history.pin(key, T0 // 1000)
    index.prune(directive["until"] - 1)
    for i in range(MARKS_KEPT + 5):
        index.published_record({**directive, "ts": directive["ts"] + i})
    marks = index.marks[(directive["quota"], label)]
    assert len(marks) == MARKS_KEPT and marks[-1][0] == directive["ts"] + MARKS_KEPT + 4
    index.prune(directive["until"] + MARKS_KEPT + 10)
    assert (directive["quota"], label) not in index.published


def test_expired_and_revoked_windows_leave_the_index() -> None:
    _, index, _ = windows()
    partition, key, _ = next(iter(index.items()))
    index.history.pin(key, 0)
    index.forget(partition, [key])
    assert index.locate(key) is None and key not in index.history.series
    before = len(index)
    held = len(index.partitions[partition])
    index.forget_partition(partition)
    assert len(index) == before - held and partition not in index.partitions


def test_the_busiest_are_the_most_utilized_recent_windows() -> None:
    _, index, _ = windows()
    busiest, over = index.busiest(3, since_ms=T0)
    ratios = [c.observed / c.limit for _, c in busiest]
    everything = sorted((c.observed / c.limit for _, _, c in index.items()), reverse=True)
    assert ratios == everything[:3]
    assert over == sum(1 for _, _, c in index.items() if c.observed > c.limit) > 0
    assert index.busiest(3, since_ms=T0 + 10**9) == ([], 0)
    assert len(USERS) <= len(index)


def test_a_charted_window_counts_its_usage_per_source_and_no_other_does() -> None:
    """Cluster scope, two gateways: the chart's areas are each gateway's bytes per second
    since the last point; a window not charted counts nothing."""
    from app.engine.engine import EngineSettings, QuotaEngine
    from app.engine.events import parse_event
    from app.console.index import chart_reading
    from tests.unit.console.engine_windows import configs

    engine = QuotaEngine(EngineSettings(scope="cluster"), configs())

    def produce(ts: int, user: str, gateway: int, nbytes: int) -> None:
        engine.process(parse_event({"v": 1, "type": "request", "ts": ts, "broker": 1,
                                    "gateway": gateway, "user": user, "client_id": "app",
                                    "api": "Produce", "bytes": nbytes}))

    produce(T0, "alice", 1, 100)
    produce(T0, "bob", 1, 100)
    windows = engine.drain_windows()
    alice = next(w for w in windows.values() if w.entity["user"] == "alice")
    bob = next(w for w in windows.values() if w.entity["user"] == "bob")
    first = chart_reading(alice, engine.store[alice.key], T0, 11, 1000, 1)
    assert first[2] == {} and alice.sources == {}  # counting starts now
    for i in range(4):
        produce(T0 + 100 * i, "alice", 1, 1_000)
        produce(T0 + 100 * i, "alice", 2, 3_000)
        produce(T0 + 100 * i, "bob", 2, 3_000)
    rate, limit, parts = chart_reading(alice, engine.store[alice.key], T0 + 2_000, 11, 1000, 2)
    assert parts == {1: 2_000.0, 2: 6_000.0} and limit == 20_000
    assert rate == engine.store[alice.key].peek(T0 + 2_000, 11, 1000) > 0
    assert alice.sources == {} and bob.sources is None
