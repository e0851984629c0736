"""The stream clock: outliers cannot move it, and its state is rebuilt from earlier records."""

from __future__ import annotations

import orjson
from hypothesis import given, settings, strategies as st

from app.intake.clock import CLOCK_SPAN, StreamClock
from app.intake.records import event_timestamps

T0 = 1_700_000_000_000
DAY = 86_400_000


def verdicts(clock: StreamClock, stamps: list[int]) -> list[bool]:
    return [clock.check(ts) is None for ts in stamps]


def test_a_single_outlier_is_rejected_and_moves_nothing() -> None:
    clock = StreamClock()
    stamps = [T0, T0 + 1, 0, T0 + 2, T0 + 100 * DAY, T0 + 3]
    assert verdicts(clock, stamps) == [True, True, False, True, False, True]
    assert clock.time == T0 + 3


def test_two_outliers_in_a_row_move_nothing() -> None:
    clock = StreamClock()
    ok = verdicts(clock, [T0, T0 + 1, T0 + 2, 5, 6, T0 + 3])
    assert ok == [True, True, True, False, False, True]


def test_a_junk_first_event_costs_at_most_two_good_ones() -> None:
    for junk in (0, T0 + 365 * DAY):
        clock = StreamClock()
        ok = verdicts(clock, [junk] + [T0 + i for i in range(10)])
        assert ok[0] is True  # nothing to judge it by
        assert ok[1:].count(False) <= 2 and all(ok[3:]), (junk, ok)


def test_a_real_jump_is_followed_once_three_of_five_agree() -> None:
    clock = StreamClock()
    later = T0 + 30 * DAY
    ok = verdicts(clock, [T0 + i for i in range(5)] + [later + i for i in range(5)])
    assert ok == [True] * 5 + [False, False, False, True, True]


def record(stamps: list[int]) -> bytes:
    events = [{"v": 1, "type": "request", "ts": ts, "broker": 1, "user": "u", "client_id": "c",
               "api": "Produce", "bytes": 10, "request_time_ms": 1.0} for ts in stamps]
    return orjson.dumps({"v": 1, "type": "batch", "events": events})


def test_event_timestamps_are_those_the_clock_judges() -> None:
    value = orjson.loads(record([T0, T0 + 1]))
    value["events"].insert(1, {"v": 1, "type": "request", "ts": "soon"})
    value["events"].append({"v": 1, "type": "quota_config", "ts": T0, "entity": {"user": "u"},
                            "quota": "producer_byte_rate", "value": 1.0})
    assert event_timestamps(orjson.dumps(value)) == [T0, T0 + 1]
    assert event_timestamps(b"{not json") == [] and event_timestamps(None) == []


stamp = st.one_of(st.integers(T0 - 3 * DAY, T0 + 3 * DAY), st.sampled_from([0, T0 + 400 * DAY]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(stamp, min_size=0, max_size=4), min_size=1, max_size=12), st.data())
def test_a_clock_seeded_from_earlier_records_judges_like_one_that_read_them(
        records: list[list[int]], data: st.DataObject) -> None:
    """What a restarted worker does (`ClockSeeder`): seed from the records before its first."""
    split = data.draw(st.integers(0, len(records)))
    whole = StreamClock()
    for stamps in records[:split]:
        verdicts(whole, stamps)
    earlier = [ts for stamps in records[:split] for ts in event_timestamps(record(stamps))]
    seeded = StreamClock()
    seeded.seed(earlier)
    assert len(seeded.recent) == min(len(earlier), CLOCK_SPAN)
    for stamps in records[split:]:
        assert verdicts(seeded, stamps) == verdicts(whole, stamps)
