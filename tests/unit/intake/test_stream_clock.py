"""The stream clock: it judges no event before a majority of the stream's recent timestamps
agree, so outliers cost no good event wherever they are; its state is rebuilt from earlier
records; and the records of a stream leave the intake whole and in order."""

from __future__ import annotations

import orjson
from hypothesis import assume, given, settings, strategies as st

from app.intake.clock import CLOCK_SPAN, HOLD_MAX, MAJORITY, StreamClock
from app.intake.records import decode_source, event_timestamps
from app.intake.stream import HOLD_MS, HOLD_RECORDS, StreamIntake

T0 = 1_700_000_000_000
DAY = 86_400_000


def verdicts(clock: StreamClock, batches: list[list[int]], settle: bool = True
             ) -> list[str | None]:
    """Each stamp's verdict in stream order (None: accepted, else why not), as the clock
    decides them; `settle`: then the input ends."""
    out: list[str | None] = []

    def take(decided: int, refused: list[tuple[int, str]]) -> None:
        base = len(out)
        out.extend([None] * decided)
        for k, reason in refused:
            out[base + k] = reason

    for batch in batches:
        take(*clock.check_all(batch))
    if settle:
        take(*clock.settle())
    return out


def ok(clock: StreamClock, stamps: list[int]) -> list[bool]:
    """One stamp at a time, then the end of the input: accepted or not."""
    return [v is None for v in verdicts(clock, [[ts] for ts in stamps])]


def test_a_single_outlier_is_rejected_and_moves_nothing() -> None:
    clock = StreamClock()
    stamps = [T0, T0 + 1, 0, T0 + 2, T0 + 100 * DAY, T0 + 3]
    assert ok(clock, stamps) == [True, True, False, True, False, True]
    assert clock.time == T0 + 3


def test_two_outliers_in_a_row_move_nothing() -> None:
    assert ok(StreamClock(), [T0, T0 + 1, T0 + 2, 5, 6, T0 + 3]) == [True] * 3 + [False] * 2 + [True]


def test_a_junk_first_event_costs_no_good_one() -> None:
    for junk in (0, 1, T0 - 2 * DAY, T0 + 365 * DAY):
        clock = StreamClock()
        got = verdicts(clock, [[junk]] + [[T0 + i] for i in range(10)])
        assert got[1:] == [None] * 10, (junk, got)
        reason = got[0]
        assert reason is not None and reason.startswith(f"ts {junk} is more than {DAY} ms from")
        assert T0 <= int(reason.rsplit(" ", 1)[1]) <= T0 + 2  # the time the good ones agree on


def test_nothing_is_judged_until_a_majority_agrees_then_the_held_ones_in_order() -> None:
    clock = StreamClock()
    assert clock.check_all([0]) == (0, [])
    assert clock.check_all([T0]) == (0, [])
    assert clock.check_all([T0 + 400 * DAY]) == (0, [])
    assert clock.check_all([T0 + 1]) == (0, [])  # two of four agree: not a majority of five
    decided, refused = clock.check_all([T0 + 2, T0 + 3])
    assert decided == 6 and [k for k, _ in refused] == [0, 2]
    assert clock.held == [] and clock.time == T0 + 3


def test_a_burst_of_outliers_that_disagree_costs_no_good_event_anywhere() -> None:
    far = [0, T0 - 10 * DAY, T0 + 30 * DAY, 7, T0 + 900 * DAY, T0 - 40 * DAY]
    good = [T0 + i for i in range(12)]
    stream = far[:3] + good[:4] + far + good[4:]
    got = ok(StreamClock(), stream)
    assert [g for g, ts in zip(got, stream) if ts in good] == [True] * len(good)
    assert [g for g, ts in zip(got, stream) if ts in far] == [False] * (len(far) + 3)


def test_a_real_jump_is_followed_once_three_of_five_agree() -> None:
    later = T0 + 30 * DAY
    got = ok(StreamClock(), [T0 + i for i in range(5)] + [later + i for i in range(5)])
    assert got == [True] * 5 + [False, False, False, True, True]


def test_at_the_end_of_the_input_the_largest_group_decides() -> None:
    """Without agreement, what is there: the largest group within the skew of each other
    among the held stamps and the five before them; of groups as large, the later times."""
    assert ok(StreamClock(), [T0]) == [True]
    assert ok(StreamClock(), [T0, T0 + 5]) == [True, True]
    assert ok(StreamClock(), [0, T0, T0 + 5]) == [False, True, True]
    assert ok(StreamClock(), [0, T0]) == [False, True]
    assert ok(StreamClock(), [T0, T0 + 400 * DAY]) == [False, True]
    assert StreamClock().settle() == (0, [])


def test_of_groups_as_large_the_one_nearest_the_arrival_time_decides() -> None:
    """A lone junk `ts` against a lone good one, settled with the stream's arrival time: the
    good one passes whichever is later, and the next hold starts from it."""
    for junk in (0, T0 + 400 * DAY):
        clock = StreamClock()
        assert clock.check_all([junk], near=T0) == (0, [])
        assert clock.check_all([T0 + 1], near=T0 + 2) == (0, [])
        decided, refused = clock.settle(near=T0 + 2)
        assert decided == 2 and [k for k, _ in refused] == [0], junk
        assert clock.time == T0 + 1
        assert clock.check_all([T0 + 3], near=T0 + 3) == (0, [])  # no majority yet: held
        assert clock.settle(near=T0 + 3) == (1, [])


def test_a_hold_ends_after_hold_max_stamps() -> None:
    """A stream whose timestamps never agree (each two days from the last) is judged with
    what is there once HOLD_MAX of them wait: only the latest time's own group passes."""
    clock = StreamClock()
    stamps = [T0 + 2 * DAY * i for i in range(HOLD_MAX + 3)]
    assert clock.check_all(stamps[:HOLD_MAX - 1]) == (0, [])
    decided, refused = clock.check_all(stamps[HOLD_MAX - 1:])
    assert decided == HOLD_MAX
    assert [k for k, _ in refused] == list(range(HOLD_MAX - 1))
    assert clock.held == stamps[HOLD_MAX:]


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


def test_records_leave_whole_in_input_order_and_a_hold_of_records_is_bounded() -> None:
    intake: StreamIntake[int] = StreamIntake(StreamClock())
    assert intake.offer(decode_source(record([0]), 0), 0) == []
    assert intake.offer(decode_source(b"{not json", 1), 1) == []
    assert intake.offer(decode_source(record([T0, T0 + 1]), 2), 2) == []  # two of three agree
    out = intake.offer(decode_source(record([T0 + 2, T0 + 400 * DAY]), 3), 3)
    assert [tag for _, tag in out] == [0, 1, 2, 3]
    assert [[i for i, _, _ in d.dead] for d, _ in out] == [[0], [0], [], [1]]
    assert [d.requests.ts for d, _ in out] == [[], [], [T0, T0 + 1], [T0 + 2]]
    assert intake.offer(decode_source(b"{not json", 4), 4)[0][1] == 4  # nothing held: at once

    held: StreamIntake[int] = StreamIntake(StreamClock())
    assert held.offer(decode_source(record([T0]), 0), 0) == []
    for n in range(1, HOLD_RECORDS - 1):
        assert held.offer(decode_source(b"[]", n), n) == []
    out = held.offer(decode_source(b"[]", HOLD_RECORDS - 1), HOLD_RECORDS - 1)
    assert [tag for _, tag in out] == list(range(HOLD_RECORDS))
    assert out[0][0].requests.ts == [T0]  # alone, it is its own largest group


def quiet_then(intake: StreamIntake[int], now: int | None, late: bytes, at: int
               ) -> list[tuple[list[int], int]]:
    """Records a junk first record holds; then, if `now`, the partition is quiet until then (the
    worker settles what is `due`); then a record arriving at `at`. What leaves, in order:
    (dead-lettered indices, tag). The records arrive as their stamps say (the junk is the stamp)."""
    out = intake.offer(decode_source(record([0]), T0 + 100), 0)
    out += intake.offer(decode_source(record([T0]), T0 + 150), 1)
    assert out == [] and intake.held
    if now is not None:
        assert not intake.due(T0 + 100 + HOLD_MS)
        assert intake.due(now)
        out += intake.finish()
        assert not intake.held
    out += intake.offer(decode_source(late, at), 2)
    return [([i for i, _, _ in d.dead], tag) for d, tag in out]


def test_a_quiet_hold_is_settled_alike_live_and_when_read_back() -> None:
    """Live, the worker settles a quiet partition's hold (`due`); a read-back, or any other
    driver, sees the next record arrive more than HOLD_MS after the first held one and settles
    it there: the same verdicts, the junk refused and the good samples through."""
    after = T0 + 101 + HOLD_MS
    late = record([T0 + 5, T0 + 6])
    live = quiet_then(StreamIntake(StreamClock()), after + 500, late, after + 600)
    read_back = quiet_then(StreamIntake(StreamClock()), None, late, after + 600)
    assert live == read_back == [([0], 0), ([], 1), ([], 2)]
    # within HOLD_MS the record joins the hold instead, and settles it by agreement
    within = quiet_then(StreamIntake(StreamClock()), None, late, T0 + 100 + HOLD_MS)
    assert within == [([0], 0), ([], 1), ([], 2)]


stamp = st.one_of(st.integers(T0 - 3 * DAY, T0 + 3 * DAY), st.sampled_from([0, T0 + 400 * DAY]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(stamp, max_size=8), min_size=1, max_size=6))
def test_checking_a_batch_equals_checking_one_by_one(batches: list[list[int]]) -> None:
    together, alone = StreamClock(), StreamClock()
    for batch in batches:
        assert verdicts(together, [batch], settle=False) == verdicts(
            alone, [[ts] for ts in batch], settle=False)
        assert (together.time, together.recent, together.held) == (
            alone.time, alone.recent, alone.held)
    assert together.settle() == alone.settle()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(stamp, min_size=0, max_size=4), min_size=1, max_size=12), st.data())
def test_a_clock_seeded_from_earlier_records_judges_like_one_that_read_them(
        records: list[list[int]], data: st.DataObject) -> None:
    """What a restarted worker does (`ClockSeeder`): seed from the records before its first.
    It starts where its group committed, which is never inside a hold (a held record is not
    acked), so where the clock that read them holds nothing."""
    whole = StreamClock()
    seen: list[str | None] = []
    boundaries = [0]
    for n, stamps in enumerate(records):
        seen += verdicts(whole, [stamps], settle=False)
        if not whole.held:
            boundaries.append(n + 1)
    seen += verdicts(whole, [], settle=True)
    split = data.draw(st.sampled_from(boundaries))
    earlier = [ts for stamps in records[:split] for ts in event_timestamps(record(stamps))]
    seeded = StreamClock()
    seeded.seed(earlier)
    assert len(seeded.recent) == min(len(earlier), CLOCK_SPAN)
    assert verdicts(seeded, records[split:]) == seen[len(earlier):]


# -- no good event pays for a bad one ---------------------------------------------------------

#: Good stamps lie within the skew of each other; an outlier lies more than the skew from any.
good_stamp = st.integers(T0, T0 + DAY)
outlier = st.one_of(st.sampled_from([0, 1, T0 + 400 * DAY, 2**53 - 1]),
                    st.integers(0, T0 - DAY - 1), st.integers(T0 + 2 * DAY + 1, 2**53 - 1))


def outliers_agree(stream: list[tuple[bool, int]]) -> bool:
    """Do MAJORITY outliers within the skew of each other share a window of CLOCK_SPAN
    stamps? Then they are a majority the clock follows (a real jump looks the same)."""
    for start in range(max(1, len(stream) - CLOCK_SPAN + 1)):
        far = sorted(ts for good, ts in stream[start:start + CLOCK_SPAN] if not good)
        if any(far[i + MAJORITY - 1] - far[i] <= DAY for i in range(len(far) - MAJORITY + 1)):
            return True
    return False


def stream_of(goods: list[int], outliers: list[int], places: list[int]) -> list[tuple[bool, int]]:
    """Goods in order with each outlier put before good number `places[k]`, then a majority of
    good ones (the stream ends once they arrived)."""
    stream = [(True, ts) for ts in goods]
    for ts, at in sorted(zip(outliers, places), key=lambda p: -p[1]):
        stream.insert(min(at, len(stream)), (False, ts))
    return stream + [(True, T0 + DAY // 2)] * MAJORITY


@settings(max_examples=400, deadline=None)
@given(st.lists(good_stamp, max_size=30), st.lists(outlier, max_size=30), st.data())
def test_outliers_anywhere_cost_no_good_event_and_are_dead_lettered_with_their_reason(
        goods: list[int], outliers: list[int], data: st.DataObject) -> None:
    """At the start, in the middle, in bursts of any length: unless outliers agree among
    themselves as a majority, every good event is accepted and every outlier refused."""
    places = data.draw(st.lists(st.integers(0, len(goods)), min_size=len(outliers),
                                max_size=len(outliers)))
    stream = stream_of(goods, outliers, places)
    assume(not outliers_agree(stream))
    cut = data.draw(st.lists(st.integers(1, 5), min_size=len(stream), max_size=len(stream)))
    batches, k = [], 0
    for size in cut:  # the stream in records of one to five events
        if k < len(stream):
            batches.append([ts for _, ts in stream[k:k + size]])
            k += size
    got = verdicts(StreamClock(), batches)
    assert [v is None for v in got] == [good for good, _ in stream]
    for v, (good, ts) in zip(got, stream):
        if not good:
            assert v is not None and v.startswith(f"ts {ts} is more than {DAY} ms from the "
                                                  "stream time ")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(good_stamp.map(lambda ts: (True, ts)),
                          outlier.map(lambda ts: (False, ts))), max_size=CLOCK_SPAN),
       st.lists(good_stamp, max_size=20), st.lists(outlier, max_size=20), st.data())
def test_after_a_restart_with_any_read_back_outliers_cost_no_good_event(
        before: list[tuple[bool, int]], goods: list[int], outliers: list[int],
        data: st.DataObject) -> None:
    """The read-back gave up to five stamps (fewer: a short or a cut read-back), good or not:
    the restarted clock holds until a majority agrees, as at a stream's start."""
    places = data.draw(st.lists(st.integers(0, len(goods)), min_size=len(outliers),
                                max_size=len(outliers)))
    stream = stream_of(goods, outliers, places)
    assume(not outliers_agree(before + stream))
    clock = StreamClock()
    clock.seed([ts for _, ts in before])
    got = verdicts(clock, [[ts] for _, ts in stream])
    assert [v is None for v in got] == [good for good, _ in stream]
