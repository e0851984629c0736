"""Per-enforcer allocations of cluster-scope quotas: the division, the engine publishing them, the
enforcer's limits (validity, static split) and the closed loop in the simulator."""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.enforcement.local import LocalQuotas
from app.enforcement.requests import RequestQuota
from app.enforcement.sources import QuotaSources
from app.engine import allocation
from app.engine.allocation import FLOOR_SHARE, HEADROOM, LEND, Shares, allocate
from app.engine.configs import ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.kafka_math import throttle_time_ms
from app.engine.events import BadEvent, RequestEvent, parse_event, parse_record
from app.engine.state_codec import StateDecodeError, decode, encode
from app.sim.meter import PhaseFigures
from app.sim.offline import run_offline
from app.sim.report import phase_table
from app.sim.scenario import load_scenario
from app.subscriber.active_set import ActiveSet
from app.contract.allocations import parse_allocation
from app.subscriber.allocations import AllocatedLimits, Allocations
from app.contract.directives import BadDirective
from app.usage.recorder import UsageRecorder
from app.usage.records import RecordEncoder

T0 = 1_763_800_000_000
Q = 1_000_000.0
SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


# -- the division -------------------------------------------------------------------------------

NONE = [0.0, 0.0, 0.0, 0.0]  # what each enforcer keeps at least: nothing (`allocation.kept`)


def test_saturated_brokers_split_what_the_others_leave_equally() -> None:
    # broker 0 uses 100k of its 400k: it keeps 1.25 x its usage; 1 and 2 use all of theirs,
    # and are lent the 25k of headroom broker 0 does not use
    out = allocate(Q, [100_000.0, 300_000.0, 300_000.0], [400_000.0, 300_000.0, 300_000.0],
                   NONE[:3])
    assert out[0] == pytest.approx(100_000.0 * HEADROOM)
    assert out[1] == pytest.approx(out[2]) == pytest.approx((Q - out[0]) / 2 + 25_000.0 / 2)
    assert sum(out) == pytest.approx(Q + 25_000.0)


def test_what_the_unsaturated_do_not_use_is_lent_to_the_saturated_up_to_a_bound() -> None:
    # the docstring's example: 200 used of 250, the other saturated at 750 is lent the 50
    assert allocate(1000.0, [200.0, 900.0], [250.0, 750.0], NONE[:2]) == pytest.approx(
        [250.0, 800.0])
    # three idle enforcers keep their floors (150 unused): at most LEND x Q of it is lent
    out = allocate(Q, [0.0, 0.0, 0.0, 900_000.0], [300_000.0, 300_000.0, 300_000.0, 100_000.0],
                   NONE)
    assert out[:3] == pytest.approx([Q * FLOOR_SHARE] * 3)
    assert sum(out) == pytest.approx(Q * (1 + LEND))
    # all saturated, or none: nothing to lend, the limits add up to the quota
    assert sum(allocate(Q, [600_000.0, 600_000.0], [500_000.0, 500_000.0], NONE[:2])) == \
        pytest.approx(Q)
    assert sum(allocate(Q, [100_000.0, 300_000.0], [500_000.0, 500_000.0], NONE[:2])) == \
        pytest.approx(Q)


def test_an_allocation_falls_no_faster_than_its_enforcers_window_drains() -> None:
    # the docstring's example: 300 kB/s held over Kafka's 11 s window is 3.3 MB; a second
    # later the broker keeps 3.3 MB / 12 s = 275 kB/s, and Kafka's formula then throttles
    # for the second that passed: C / A - W
    keep = allocation.kept([3_300_000.0], [300_000.0], 11_000, 1_000)
    assert keep == pytest.approx([275_000.0])
    assert 3_300_000.0 / keep[0] * 1000 - 11_000 == pytest.approx(1_000)
    # never more than it was allocated; nothing held, nothing kept
    assert allocation.kept([9e6, 0.0], [300_000.0, 300_000.0], 11_000, 1_000) == [300_000.0, 0.0]
    # brokers 0 and 1 hold their halves; broker 2 appears, saturated: the equal split (Q/3)
    # comes as their windows drain, and the limits still add up to the quota
    rates, before = [500_000.0, 500_000.0, 50_000.0], [500_000.0, 500_000.0, 0.0]
    held = [5_500_000.0, 5_500_000.0, 50_000.0]
    soon = allocate(Q, rates, before, allocation.kept(held, before, 11_000, 1_000))
    assert soon[0] == pytest.approx(5_500_000.0 / 12) and soon[2] < Q / 3
    assert sum(soon) == pytest.approx(Q)
    drained = allocate(Q, rates, before, allocation.kept([0.0, 0.0, 50_000.0], before, 11_000,
                                                         1_000))
    assert drained == pytest.approx([Q / 3] * 3)


@pytest.mark.parametrize("share", [0.0, 0.3, 0.5, 1.0])
def test_kept_allocations_still_add_up_and_leave_every_broker_its_floor(share: float) -> None:
    # two brokers held all of it a moment ago and keep `share` of it; two new ones appear
    out = allocate(Q, [500_000.0, 500_000.0, 50_000.0, 50_000.0],
                   [500_000.0, 500_000.0, 0.0, 0.0], [share * 500_000.0] * 2 + [0.0, 0.0])
    assert sum(out) == pytest.approx(Q)
    assert min(out) >= Q * FLOOR_SHARE - 1e-6


def test_every_broker_keeps_the_floor_and_new_brokers_count_as_saturated() -> None:
    out = allocate(Q, [0.0, 900_000.0, 1_000.0], [500_000.0, 500_000.0, 0.0], NONE[:3])
    assert min(out) >= Q * FLOOR_SHARE - 1e-6
    assert out[2] > Q * FLOOR_SHARE  # the new one shares the rest with the busy one
    assert sum(out) == pytest.approx(Q + Q * FLOOR_SHARE)  # broker 0's floor is lent


def test_without_saturated_brokers_the_rest_follows_usage_shares() -> None:
    out = allocate(Q, [100_000.0, 300_000.0], [500_000.0, 500_000.0], NONE[:2])
    assert out[1] > out[0]
    assert sum(out) == pytest.approx(Q)


def test_an_enforcer_one_request_short_of_its_allocation_is_saturated() -> None:
    # 67 kB/s allocated to an enforcer whose client sends 38 kB requests: over a 1 s span it
    # admits one or two of them, and reads 38 or 76 kB/s by where the span falls
    assert allocation.is_saturated(38_000.0, 67_000.0, grain=38_000.0)
    assert not allocation.is_saturated(38_000.0, 67_000.0)  # requests of no size: clearly under
    assert not allocation.is_saturated(20_000.0, 67_000.0, grain=16_000.0)  # two requests short
    # the division follows the verdicts: one request short keeps its equal share
    rates, before = [38_000.0, 76_000.0, 76_000.0], [67_000.0] * 3
    grains = [38_000.0] * 3
    cut = allocate(200_000.0, rates, before, NONE[:3])
    kept = allocate(200_000.0, rates, before, NONE[:3],
                    saturated=allocation.saturation(rates, before, grains))
    assert cut[0] == pytest.approx(38_000.0 * HEADROOM)
    assert kept == pytest.approx([200_000.0 / 3] * 3)


def test_an_enforcer_that_throttled_within_the_span_is_saturated_whatever_it_used() -> None:
    # a muted client uses nothing: by usage alone its broker reads as idle
    rates, before = [0.0, 480_000.0], [500_000.0, 500_000.0]
    assert allocation.saturation(rates, before) == [False, True]
    assert allocation.saturation(rates, before, throttled=[True, False]) == [True, True]
    assert allocate(Q, rates, before, NONE[:2],
                    saturated=allocation.saturation(rates, before, throttled=[True, False])
                    ) == pytest.approx([Q / 2, Q / 2])


def test_a_saturated_enforcer_admitting_more_than_its_allocation_has_its_bound_trimmed() -> None:
    # the docstring's example: allocated 175 kB/s, admits 250 kB/s
    admitted = [250_000.0]
    assert allocation.trimmed([1.0], admitted, [175_000.0], [True], 11_000, 11_000) == \
        pytest.approx([137_500.0 / 175_000.0])
    # a second later: a window's step in proportion; what it admits below it raises it again
    assert allocation.trimmed([1.0], admitted, [175_000.0], [True], 11_000, 1_100)[0] == \
        pytest.approx(1 - 0.05 * 75 / 175)
    assert allocation.trimmed([0.5], [100_000.0], [175_000.0], [True], 11_000, 11_000) == \
        pytest.approx([0.5 * (1 + 0.5 * 75 / 175)])
    # unsaturated, it goes back towards its allocation; within [TRIM_MIN, TRIM_MAX]
    assert allocation.trimmed([0.5], admitted, [175_000.0], [False], 11_000, 11_000) == [0.75]
    assert allocation.trimmed([allocation.TRIM_MIN], [9e9], [175_000.0], [True], 11_000,
                              11_000) == [allocation.TRIM_MIN]
    assert allocation.trimmed([allocation.TRIM_MAX], [0.0], [175_000.0], [True], 11_000,
                              11_000) == [allocation.TRIM_MAX]


def test_a_saturated_enforcer_admitting_less_than_its_allocation_has_its_bound_raised() -> None:
    # a consumer whose fetches are its window's worth gets half its bound from Kafka: its
    # broker throttles it, and admits half its allocation; the bound rises above it
    admitted = [87_500.0]
    assert allocation.trimmed([1.0], admitted, [175_000.0], [True], 11_000, 11_000) == \
        pytest.approx([1.25])
    # by a step a window at most: a second later, a tenth of that
    assert allocation.trimmed([1.0], admitted, [175_000.0], [True], 11_000, 1_100) == \
        pytest.approx([1.025])


def test_shares_tell_the_mean_request_from_counts_over_the_span() -> None:
    shares = Shares()
    shares.record(1, 30_000.0, T0)  # the first span: two requests of 30 kB and 50 kB
    shares.record(1, 50_000.0, T0 + 400)
    shares.record(2, 9_000.0, T0 + 500, count=3)  # an aggregated row: three requests
    shares.record(1, 20_000.0, T0 + 1_200)  # the next span
    # half the older span is still inside the last 1000 ms at T0 + 1500
    assert shares.grains(T0 + 1_500) == pytest.approx([(40_000.0 + 20_000.0) / 2.0, 3_000.0])
    empty = Shares()
    empty.record(3, 0.0, T0, count=0)
    assert empty.grains(T0) == [0.0]


def test_shares_hold_what_each_enforcers_window_holds() -> None:
    shares = Shares()
    for second in range(12):  # broker 1: 100 kB a second; broker 2: only the first 3 s
        shares.record(1, 100_000.0, T0 + second * 1000, depth=11)
        if second < 3:
            shares.record(2, 50_000.0, T0 + second * 1000, depth=11)
    # at T0 + 12 s the last 11 s hold broker 1's seconds 1..11, broker 2's seconds 1 and 2
    assert shares.held(T0 + 12_000, 11_000) == pytest.approx([1_100_000.0, 100_000.0])
    # half a second into the next span, half of second 1 is out of the window
    shares.record(1, 0.0, T0 + 12_500, depth=11)
    assert shares.held(T0 + 12_500, 11_000) == pytest.approx([1_050_000.0, 75_000.0])
    # broker 2 leaves once nothing of it is in its window any more
    shares.record(1, 0.0, T0 + 14_000, depth=11)
    assert shares.enforcers == [1]


def test_shares_keep_an_enforcer_muting_its_clients_listed_and_throttled() -> None:
    shares = Shares()
    shares.record(1, 1_000_000.0, T0, throttle_ms=9_000)  # one large request, a 9 s mute
    shares.record(2, 10_000.0, T0)
    assert shares.throttled(T0 + 500) == [True, False]
    for second in range(1, 8):  # broker 1's client waits out its mute: it reports nothing
        shares.record(2, 10_000.0, T0 + second * 1000)
    assert shares.enforcers == [1, 2]  # nothing in its last span, but still muting
    assert shares.throttled(T0 + 7_000) == [True, False]
    # a mute counts until a span after it ended (a per-second event places it early)
    assert shares.throttled(T0 + 10_500) == [True, False]
    assert shares.throttled(T0 + 11_500) == [False, False]


def test_shares_round_trip_through_the_state_codec() -> None:
    shares = Shares()
    for i, broker in enumerate([1, 2, 1, 3]):
        shares.record(broker, 1000.0 * (i + 1), T0 + i * 700, count=i + 1, throttle_ms=10 * i,
                      depth=3)
    shares.allocated, shares.limit, shares.until = [1.0, 2.0, 3.0], Q, T0 + 5000
    shares.trim = [1.0, 0.5, 0.25]
    back = decode(encode(shares))
    assert isinstance(back, Shares)
    assert (back.head(), back.rows()) == (shares.head(), shares.rows())
    assert back.rates(T0 + 3000) == shares.rates(T0 + 3000)
    assert back.grains(T0 + 3000) == shares.grains(T0 + 3000)
    assert back.held(T0 + 3000, 2500) == shares.held(T0 + 3000, 2500)
    assert back.bounds() == pytest.approx([1.0, 1.0, 0.75])


@pytest.mark.parametrize("layout, row", [(b"S\x00", "<iddd"), (b"S\x01", "<iddddd")])
def test_shares_stored_in_older_layouts_read_as_one_past_span_without_mutes(
        layout: bytes, row: str) -> None:
    # layout 0 (before request counts) and 1 (before spans, mutes and trims): the last span
    # was `prev`, and `next_check` stood where `checked` stands now
    head = struct.pack("<B2sqqqqdqH", 1, layout, T0 + 1500, 0, T0, T0 + 1000, Q, T0 + 1600, 1)
    values = (2, 5_000.0, 4_000.0, 7_000.0, 3.0, 2.0)[:len(struct.unpack(row, bytes(
        struct.calcsize(row))))]
    back = decode(head + struct.pack(row, *values))
    assert isinstance(back, Shares)
    assert back.enforcers == [2] and back.allocated == [7_000.0] and back.trim == [1.0]
    assert back.depth == 1 and back.past == [4_000.0] and back.muted == [0]
    assert back.rates(T0 + 1000) == pytest.approx([9_000.0])
    assert back.grains(T0 + 1000) == ([0.0] if layout == b"S\x00" else [9_000.0 / 5.0])
    with pytest.raises(StateDecodeError):
        decode(head[:2] + b"\x07" + head[3:] + struct.pack(row, *values))


# -- the engine ---------------------------------------------------------------------------------

def cluster_engine(**settings: Any) -> QuotaEngine:
    engine = QuotaEngine(EngineSettings(scope="cluster", accounting="served", allocations=True,
                                        **settings))
    update = parse_event({"type": "quota_config", "v": 1, "ts": T0, "entity": {"user": "alice"},
                          "quotas": {"producer_byte_rate": Q}})
    assert isinstance(update, ConfigUpdate)
    engine.process(update)
    return engine


def produce(engine: QuotaEngine, t: int, broker: int, nbytes: int, gateway: int = -1
            ) -> list[dict[str, Any]]:
    event = RequestEvent(T0 + t, broker, "PLAINTEXT", "alice", "app", "10.0.0.1", "Produce",
                         nbytes, 0.0, 0.0, False, 1, gateway)
    return engine.process(event)[1]


def allocated(record: dict[str, Any]) -> dict[int, float]:
    """Each enforcer's allocation in a record (it holds that x its trim)."""
    return {e["enforcer"]: e["limit"] for e in record["enforcers"]}


def feed(engine: QuotaEngine, seconds: int, rates: dict[int, float]) -> list[dict[str, Any]]:
    """Every broker reports its rate every 100 ms for `seconds`; what was published."""
    out = []
    for step in range(seconds * 10):
        for broker, rate in rates.items():
            out.extend(produce(engine, step * 100, broker, int(rate / 10)))
    return out


def test_allocations_replace_client_quota_directives_and_are_not_published_per_event() -> None:
    engine = cluster_engine()
    published = feed(engine, 20, {1: 1.2 * Q, 2: 1.2 * Q})  # 2.4x the quota
    assert published and all(p["kind"] == "allocation" for p in published)
    assert len(published) < 20 * 1000 / allocation.CHECK_MS / 4  # not one per check, let alone event
    first = published[0]
    assert first["ts"] >= T0 + allocation.SPAN_MS  # waits for a span of usage
    assert first["valid_until"] == first["ts"] + 5000
    last = published[-1]
    limits = allocated(last)
    assert set(limits) == {1, 2} and sum(limits.values()) == pytest.approx(Q)
    assert limits[1] == pytest.approx(limits[2], rel=0.2)
    # each broker admits 1.2 Q, more than twice its allocation: its bound is trimmed for it
    assert all(e["trim"] < 0.8 for e in last["enforcers"])
    gaps = [b["ts"] - a["ts"] for a, b in zip(published, published[1:])]
    assert max(gaps) <= 5000 // 2 + allocation.CHECK_MS  # refreshed before the validity ends


def test_a_broker_left_by_its_traffic_gives_its_share_to_the_busy_one() -> None:
    engine = cluster_engine()
    feed(engine, 15, {1: 0.9 * Q, 2: 0.9 * Q})
    later = [p for p in feed(engine, 0, {})]
    assert later == []
    out = []
    for step in range(150, 400):  # broker 1 goes quiet, broker 2 stays busy
        out.extend(produce(engine, step * 100, 2, int(0.9 * Q / 10)))
    last = allocated(out[-1])
    assert last.get(1, out[-1]["others"]) <= Q * FLOOR_SHARE * 1.01
    assert last[2] >= Q * 0.9


def staircase(engine: QuotaEngine, seconds: int, report_throttles: bool = True
              ) -> list[dict[str, Any]]:
    """Three brokers throttling with Kafka's formula over whole-second samples, as the broker
    plugin's do: each reports once a second (its usage events are per second) and admits its
    client in bursts, 2 s at twice a third of the quota then 2 s muted, out of phase with the
    others; each uses its third over the 4 s. What a broker muting its client reports is no
    usage, and, with `report_throttles`, the mute it answered the last request with."""
    out = []
    for second in range(seconds):
        for broker in (1, 2, 3):
            phase = (second + broker) % 4
            if phase < 2:
                mute = 2000 if phase == 1 and report_throttles else 0
                event = RequestEvent(T0 + second * 1000, broker, "", "alice", "app", "",
                                     "Produce", int(2 * Q / 3), 0.0, 0.0, False, 1,
                                     throttle_ms=mute)
                out.extend(engine.process(event)[1])
    return out


def test_brokers_muting_their_clients_for_seconds_keep_their_share() -> None:
    """A muted client uses nothing: over the 1 s span the brokers' allocations would fall to the
    floor in turn, and a broker at the floor mutes its client for longer still. The throttles
    they report make them saturated, and the usage their windows hold keeps each from falling
    faster than its window drains: each is seen using its third, and keeps it."""
    def lowest(reports: bool) -> float:
        published = staircase(cluster_engine(), 40, reports)
        late = [p for p in published if p["ts"] >= T0 + 15_000]
        assert late
        return min(a for p in late for a in allocated(p).values())

    assert lowest(True) >= 0.3 * Q
    # without the throttles, their windows alone still keep them well above the floor
    assert lowest(False) >= 4 * Q * FLOOR_SHARE


def per_second(engine: QuotaEngine, second: int, usage: dict[int, float],
               throttles: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """The brokers' usage events of one second, as the broker plugin reports them: one per
    broker, stamped with the second, after it ended."""
    out = []
    for broker, nbytes in usage.items():
        event = RequestEvent(T0 + second * 1000, broker, "", "alice", "app", "", "Produce",
                             int(nbytes), 0.0, 0.0, False, 4,
                             throttle_ms=(throttles or {}).get(broker, 0))
        out.extend(engine.process(event)[1])
    return out


def test_the_division_at_a_seconds_first_event_sees_the_last_second_whole() -> None:
    # broker 1 reports first every second: were its new second counted before the division,
    # it would read twice broker 2's usage (a second and a bit) though they use the same
    engine = cluster_engine()
    out = []
    for second in range(12):
        out += per_second(engine, second, {1: 0.3 * Q, 2: 0.3 * Q})
    assert out
    for record in out:
        usage = {e["enforcer"]: e["usage"] for e in record["enforcers"]}
        assert usage == {1: pytest.approx(0.3 * Q), 2: pytest.approx(0.3 * Q)}


def test_the_first_allocation_waits_two_spans_and_starts_from_the_static_split() -> None:
    # until the first allocation the enforcers hold quota / 2: broker 1 uses a fifth of its
    # half, broker 2 all of it. The first division judges them against that split, so broker
    # 1 is allocated what it uses with headroom and broker 2 the rest, not half each
    engine = cluster_engine()
    out = per_second(engine, 0, {1: 0.1 * Q, 2: 0.5 * Q})
    out += per_second(engine, 1, {2: 0.5 * Q})  # broker 1's report of second 1 is late
    assert out == []  # two spans of usage first: every enforcer reporting once a span has
    (first,) = per_second(engine, 2, {1: 0.1 * Q, 2: 0.5 * Q})
    assert first["ts"] == T0 + 2000
    limits = {e["enforcer"]: e["limit"] for e in first["enforcers"]}
    assert limits[1] < 0.2 * Q < 0.8 * Q < limits[2]


def test_a_broker_whose_report_is_late_keeps_what_its_window_holds() -> None:
    # two brokers at their halves for 15 s; broker 2's report of one second comes late: by its
    # usage alone it is idle, and cut to the floor Kafka's formula would answer what its 11 s
    # window holds with a mute of C / floor - W = 5.5 Q / 0.05 Q - 11 s: 99 s
    engine = cluster_engine()
    for second in range(15):
        per_second(engine, second, {1: 0.5 * Q, 2: 0.5 * Q})
    out = per_second(engine, 15, {1: 0.5 * Q}) + per_second(engine, 16, {1: 0.5 * Q})
    assert out  # a second of no usage moved it enough to publish
    for record in out:
        limits = allocated(record)
        elapsed = 4000  # at most half a validity since the last one, and the seconds since
        assert limits[2] >= 0.5 * Q * 11_000 / (11_000 + elapsed)
        assert sum(limits.values()) <= Q * (1 + LEND) * 1.0001


def test_a_throttle_in_a_usage_event_makes_its_broker_saturated() -> None:
    # broker 2 reads idle over the last second, but it reported a mute: its client was held,
    # not gone, and it shares the rest with broker 1
    engine = cluster_engine()
    out = []
    for second in range(20):
        mute = {2: 3000} if second % 3 == 0 else {}
        usage = {1: 0.5 * Q, 2: 1.5 * Q if second % 3 == 0 else 0.0}
        out += per_second(engine, second, usage, mute)
    late = [r for r in out if r["ts"] >= T0 + 12_000]
    assert late and all(e["saturated"] for r in late for e in r["enforcers"])
    assert all(allocated(r)[2] >= 0.45 * Q for r in late)


def test_named_gateways_are_the_enforcers_whatever_brokers_they_front() -> None:
    # gateways 7 and 8 both front brokers 1 and 2; gateway 7 carries 4x gateway 8's traffic
    engine = cluster_engine()
    out = []
    for step in range(60):
        for broker in (1, 2):
            out.extend(produce(engine, step * 100, broker, int(0.8 * Q / 20), gateway=7))
            out.extend(produce(engine, step * 100, broker, int(0.2 * Q / 20), gateway=8))
    limits = {e["enforcer"]: e["limit"] for e in out[-1]["enforcers"]}
    assert set(limits) == {7, 8} and Q * 0.999 <= sum(limits.values()) <= Q * (1 + LEND)
    assert limits[7] > limits[8]


def left_for(seconds: int, gateways: bool) -> dict[int, float]:
    """Enforcers 1 and 2 each at 0.9 Q for 15 s, then 1 left `seconds` by its traffic: their
    allocations then (one no longer listed: the floor, `others`). Enforcers named gateways in
    front of broker 1, or brokers 1 and 2."""
    engine = cluster_engine()  # brokers' window: Kafka's 11 s, the default
    out = []
    for step in range(150 + seconds * 10):
        for enforcer in (1, 2) if step < 150 else (2,):
            out.extend(produce(engine, step * 100, 1 if gateways else enforcer,
                               int(0.9 * Q / 10), gateway=enforcer if gateways else -1))
    return {1: out[-1]["others"], **allocated(out[-1])}


def test_a_named_gateway_is_released_as_its_own_window_drains_a_broker_as_kafkas() -> None:
    # a gateway holds its allocation over QS_QUOTA_WINDOW_NUM x QS_ALLOCATION_SAMPLE_MS (1.1 s):
    # 3 s after its traffic left, nothing is kept of it; a broker's 11 s window still holds 8 s
    # of 0.9 Q, kept over the window and the 3 s since: about half the quota
    assert left_for(3, gateways=True)[1] <= Q * FLOOR_SHARE * 1.01
    assert left_for(3, gateways=False)[1] >= 0.45 * Q


def test_a_named_gateways_bound_is_its_allocation_never_trimmed() -> None:
    # each admits 1.2 Q, as the brokers of the test above whose bounds are trimmed: a gateway's
    # throttle repays a debt, so over time it admits its allocation whatever it admitted lately
    engine = cluster_engine()
    out = []
    for step in range(200):
        for gateway in (1, 2):
            out.extend(produce(engine, step * 100, 1, int(1.2 * Q / 10), gateway=gateway))
    assert out and all(e["trim"] == 1.0 for record in out for e in record["enforcers"])


def test_a_gateway_its_traffic_left_is_muting_only_while_its_last_mute_lasts() -> None:
    # gateways 1 and 2 each use their half; gateway 1 answers its last request with a 100 ms
    # throttle and its traffic leaves: half a second after that mute ended it is unsaturated
    engine = cluster_engine()
    out = []
    for step in range(36):
        for gateway in (1, 2) if step < 30 else (2,):
            event = RequestEvent(T0 + step * 100, 1, "PLAINTEXT", "alice", "app", "10.0.0.1",
                                 "Produce", int(0.5 * Q / 10), 0.0, 0.0, False, 1, gateway,
                                 100 if (gateway, step) == (1, 29) else 0)
            out.extend(engine.process(event)[1])
    last = {e["enforcer"]: e for e in out[-1]["enforcers"]}
    assert out[-1]["ts"] > T0 + 3000 and not last[1]["saturated"]


def test_enforcers_held_in_requests_of_a_fifth_of_the_quota_keep_their_shares() -> None:
    """Three gateways each admit a 0.19 Q request every 570 ms, their third of the quota: a 1 s
    span sees one or two of them, 0.19 or 0.38 Q/s. Judged by usage alone, the one that read
    0.19 would be cut to its usage plus headroom; one request short, it is saturated."""
    engine = cluster_engine()
    out = []
    for step in range(0, 30_000, 10):
        for gateway in (1, 2, 3):
            if (step + 190 * gateway) % 570 == 0:
                out.extend(produce(engine, step, 1, int(0.19 * Q), gateway=gateway))
    late = [p for p in out if p["ts"] >= T0 + 5_000]
    assert late
    assert all(e["saturated"] for p in late for e in p["enforcers"])
    assert min(e["limit"] for p in late for e in p["enforcers"]) >= 0.3 * Q


def test_the_same_events_give_the_same_allocations() -> None:
    runs = [feed(cluster_engine(), 12, {1: 2 * Q, 2: 0.1 * Q, 3: 0.5 * Q}) for _ in range(2)]
    assert runs[0] == runs[1]


def test_allocations_need_cluster_scope() -> None:
    with pytest.raises(ValueError):
        EngineSettings(scope="broker", allocations=True)


# -- the enforcer -------------------------------------------------------------------------------

def record(ts: int = T0, valid: int = 5000, **over: Any) -> dict[str, Any]:
    base = {"v": 1, "kind": "allocation", "ts": ts, "scope": "cluster",
            "entity": {"user": "alice", "client_id": ""}, "quota": "producer_byte_rate",
            "limit": Q, "window_ms": 11000, "config_level": "/config/users/alice",
            "valid_until": ts + valid, "others": Q * FLOOR_SHARE,
            "enforcers": [{"enforcer": 1, "limit": 0.7 * Q}, {"enforcer": 2, "limit": 0.3 * Q}]}
    base.update(over)
    return base


@pytest.mark.parametrize("bad, reason", [
    ({"valid_until": T0 + 10**9}, "bad_validity"),
    ({"valid_until": T0}, "bad_validity"),
    ({"limit": float("nan")}, "out_of_range"),
    ({"enforcers": [{"enforcer": 1, "limit": 2 * Q}]}, "out_of_range"),
    ({"enforcers": [{"enforcer": 1, "limit": 0.6 * Q}, {"enforcer": 2, "limit": 0.6 * Q}]},
     "over_quota"),
    ({"enforcers": [{"enforcer": n, "limit": 1.0} for n in range(allocation.MAX_ENFORCERS + 1)]},
     "bad_enforcers"),
    ({"quota": "connection_creation_rate"}, "bad_quota"),
    ({"entity": "alice"}, "bad_entity"),
    ({"enforcers": [{"enforcer": -1, "limit": 1.0}]}, "wrong_type"),
    ({"enforcers": [{"enforcer": 1, "limit": 0.5 * Q, "trim": allocation.TRIM_MAX + 0.5}]},
     "out_of_range"),
    ({"enforcers": [{"enforcer": 1, "limit": 0.5 * Q, "trim": allocation.TRIM_MIN / 2}]},
     "out_of_range"),
])
def test_bad_allocations_are_refused_with_a_reason(bad: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadDirective) as err:
        parse_allocation(record(**bad))
    assert err.value.reason == reason


def test_allocation_limits_then_static_split_after_validity() -> None:
    allocations = Allocations()
    limits = AllocatedLimits(allocations, lambda: 4)
    assert limits.limit("producer_byte_rate", "alice", "", 1, Q) == Q / 4  # none yet: static
    assert allocations.apply(record(), T0) == "added"
    assert limits.limit("producer_byte_rate", "alice", "", 1, Q) == pytest.approx(0.7 * Q)
    assert limits.limit("producer_byte_rate", "alice", "", 9, Q) == pytest.approx(Q * FLOOR_SHARE)
    # the quota lowered since: the allocation scales with it
    assert limits.limit("producer_byte_rate", "alice", "", 2, Q / 2) == pytest.approx(0.15 * Q)
    assert limits.limit("request_percentage", "alice", "", 1, 50.0) == 12.5  # none for it: static
    assert limits.limit("controller_mutation_rate", "alice", "", 1, 5.0) == 5.0  # never allocated
    assert allocations.apply(record(ts=T0 - 1), T0) == "stale"
    version = limits.version
    limits.at(T0 + 5000)  # validity over
    assert limits.version != version
    assert limits.limit("producer_byte_rate", "alice", "", 1, Q) == Q / 4


def test_an_enforcer_holds_its_allocation_times_its_trim() -> None:
    allocations = Allocations()
    limits = AllocatedLimits(allocations, lambda: 2)
    trimmed = record(enforcers=[{"enforcer": 1, "limit": 0.7 * Q, "trim": 0.5},
                                {"enforcer": 2, "limit": 0.3 * Q, "trim": allocation.TRIM_MAX}])
    # the bounds add up to 1.25 Q: the quota's check is on the allocations, which add up to Q
    assert allocations.apply(trimmed, T0) == "added"
    assert limits.limit("producer_byte_rate", "alice", "", 1, Q) == pytest.approx(0.35 * Q)
    assert limits.limit("producer_byte_rate", "alice", "", 2, Q) == \
        pytest.approx(0.3 * allocation.TRIM_MAX * Q)


def test_active_set_takes_allocation_records_beside_directives() -> None:
    active = ActiveSet(broker_id=2)
    assert active.apply(record(), T0) == "added"
    assert len(active) == 0 and len(active.allocations) == 1
    with pytest.raises(BadDirective):
        active.apply(record(limit=-1.0), T0)


def test_local_quotas_throttle_at_the_brokers_allocation() -> None:
    settings = EngineSettings(window_num=11, window_ms=1000)
    configs = cluster_engine().configs
    allocations = Allocations()
    allocations.apply(record(), T0)
    local = LocalQuotas(settings, configs)
    local.obey(AllocatedLimits(allocations, lambda: 2))

    def first_throttle(broker: int) -> int:
        for i in range(200):
            if local.request(broker, T0 + i * 100, "PLAINTEXT", "alice", "app", "10.0.0.1",
                             "Produce", int(Q / 10), 0.0, False)[0]:
                return i
        return -1

    # 10x its allocation per second on broker 2 (0.3 Q) is throttled sooner than on broker 1
    assert 0 <= first_throttle(2) < first_throttle(1)


def test_a_named_gateway_holds_its_allocation_over_all_the_brokers_behind_it() -> None:
    settings = EngineSettings(window_num=11, window_ms=1000)
    allocations = Allocations()
    allocations.apply(record(), T0)  # enforcer 2: 0.3 Q
    local = LocalQuotas(settings, cluster_engine().configs, gateway=2)
    local.obey(AllocatedLimits(allocations, lambda: 2))
    admitted = 0
    for i in range(100):  # 10 s, 0.2 Q on each of brokers 1, 2 and 3 behind gateway 2
        for broker in (1, 2, 3):
            if local.request(broker, T0 + i * 100, "PLAINTEXT", "alice", "app", "10.0.0.1",
                             "Produce", int(0.02 * Q), 0.0, False)[0] == 0:
                admitted += 1
    # at most: one window over the three brokers at gateway 2's 0.3 Q, not three at a broker's
    # each (those would admit all 0.6 Q/s). At least: what that window holds at 0.3 Q, 11
    # samples of 100 ms (0.33 Q), admitted before the first throttle; this client never waits
    # out a throttle, so its debt is never repaid and no more need pass
    assert 0.3 * Q * 11 * 0.1 / 10 <= admitted * 0.02 * Q / 10 <= 0.45 * Q


def test_a_named_gateways_requests_name_it_as_their_enforcer() -> None:
    recorder = UsageRecorder(gateway=4)
    recorder.request(2, T0, "PLAINTEXT", "alice", "app", "10.0.0.1", "Produce", 100, 0.5, 0.0)
    recorder.connection(2, T0, "PLAINTEXT", "10.0.0.1")
    events = [e for record in RecordEncoder().records(recorder.flush())
              for e in parse_record(orjson.loads(record.value))]
    request = next(e for e in events if isinstance(e, RequestEvent))
    assert (request.broker, request.gateway, request.enforcer) == (2, 4, 4)
    assert len(events) == 2 and not any(isinstance(e, BadEvent) for e in events)


def test_an_enforcer_holds_allocated_quotas_over_short_samples_and_the_rest_over_kafkas() -> None:
    settings = EngineSettings(window_num=11, window_ms=1000, allocation_sample_ms=100)
    configs = cluster_engine().configs
    allocations = Allocations()
    allocations.apply(record(), T0)
    engine = QuotaEngine(settings, configs, limits=AllocatedLimits(allocations, lambda: 2))
    plain = QuotaEngine(settings, configs)
    windows = {}
    for name, e in (("allocated", engine), ("plain", plain)):
        decisions = []
        for i in range(30):  # 3 s at 0.3 Q, broker 2's allocation
            event = RequestEvent(T0 + i * 100, 2, "PLAINTEXT", "alice", "app", "10.0.0.1",
                                 "Produce", int(0.03 * Q), 0.0, 0.0, False, 1)
            decisions.extend(e.process(event)[0])
        windows[name] = max(d.window_ms for d in decisions)
        assert decisions[-1].limit == (pytest.approx(0.3 * Q) if name == "allocated" else Q)
    assert 10 * 100 <= windows["allocated"] <= 11 * 100  # Kafka's window size: N-1 samples or more
    assert 10 * 1000 <= windows["plain"] <= 11 * 1000



@pytest.mark.parametrize("nbytes, cap_ms", [(0.2 * Q, 1100), (1.2 * Q, 2290)])
def test_a_request_far_over_its_allocation_waits_a_span_or_its_debt_at_the_static_split(
        nbytes: float, cap_ms: int) -> None:
    # a client back on an enforcer left at the floor (0.05 Q) sends what piled up while it was
    # away: repaid at the floor its debt would mute it for far longer than the 1.1 s its window
    # remembers; it waits a span, or its debt at the split (Q / 2 enforcers): a full bucket
    # of 0.05 Q x 1.1 s less 1.2 Q is a debt of 1.145 Q, 2290 ms at 0.5 Q
    settings = EngineSettings(window_num=11, window_ms=1000, allocation_sample_ms=100)
    configs = cluster_engine().configs
    allocations = Allocations()
    allocations.apply(record(enforcers=[{"enforcer": 1, "limit": Q, "usage": 0.0,
                                         "saturated": True}]), T0)
    engine = QuotaEngine(settings, configs, limits=AllocatedLimits(allocations, lambda: 2))
    event = RequestEvent(T0, 2, "PLAINTEXT", "alice", "app", "10.0.0.1", "Produce", int(nbytes),
                         0.0, 0.0, False, 1)
    decision = max(engine.process(event)[0], key=lambda d: d.throttle_time_ms)
    assert decision.limit == pytest.approx(FLOOR_SHARE * Q)
    assert throttle_time_ms(decision.observed, decision.limit, decision.window_ms) > 2 * cap_ms
    assert decision.throttle_time_ms == cap_ms


def test_requests_pipelined_behind_an_oversized_one_add_to_its_mute() -> None:
    # a client with requests in flight (five by default for most) sends them before the first
    # throttled response mutes it: each one's wait counts what the window already holds
    settings = EngineSettings(window_num=11, window_ms=1000, allocation_sample_ms=100)
    allocations = Allocations()
    allocations.apply(record(enforcers=[{"enforcer": 1, "limit": Q}]), T0)
    engine = QuotaEngine(settings, cluster_engine().configs,
                         limits=AllocatedLimits(allocations, lambda: 2))
    waits = []
    for _ in range(3):  # 0.6 Q each in the same millisecond, at the floor 0.05 Q, split 0.5 Q
        event = RequestEvent(T0, 2, "PLAINTEXT", "alice", "app", "10.0.0.1", "Produce",
                             int(0.6 * Q), 0.0, 0.0, False, 1)
        waits.append(max(d.throttle_time_ms for d in engine.process(event)[0]))
    # the debt after each (0.545, 1.145 and 1.745 Q) at the split: a span, then 2.29 s, 3.49 s
    assert waits == [1100, 2290, 3490]


@pytest.mark.parametrize("in_flight, nbytes", [(1, 16_000), (5, 16_000), (1, 97_000),
                                               (5, 97_000)])
def test_a_client_gets_its_enforcers_allocation_whatever_its_requests(in_flight: int,
                                                                      nbytes: int) -> None:
    # a producer sends `in_flight` requests back to back whenever it is not muted, for a minute,
    # through an enforcer allocated a third of the quota: over a 1.1 s window Kafka's formula
    # let such clients through at 1.2-1.5x (samples leave the window during the wait)
    allocations = Allocations()
    local = LocalQuotas(EngineSettings(window_num=11, window_ms=1000, allocation_sample_ms=100),
                        cluster_engine().configs)
    local.obey(AllocatedLimits(allocations, lambda: 3))
    share = Q / 3
    t, muted, admitted, renew = T0, T0, 0, T0
    while t < T0 + 60_000:
        if t >= renew:
            allocations.apply(record(ts=t, enforcers=[{"enforcer": 1, "limit": share}]), t)
            renew = t + 1000
        if t >= muted:
            for _ in range(in_flight):
                ms, _ = local.request(1, t + 3, "PLAINTEXT", "alice", "app", "10.0.0.1",
                                      "Produce", nbytes, 0.0, False)
                admitted += nbytes
                muted = max(muted, t + 3 + ms)
            t += 3
        else:
            t = muted
    # a minute's allocation, plus at most the window's burst and the last requests in flight
    assert share * 60 * 0.97 <= admitted <= share * 61.1 + in_flight * nbytes


def consumer_at_the_floor() -> LocalQuotas:
    """Enforcer 2 in front of alice's consumers, held at the floor: enforcer 1 has all of it."""
    engine = QuotaEngine(EngineSettings(scope="cluster", allocations=True))
    engine.process(ConfigUpdate("client", ("alice", None), {"consumer_byte_rate": Q}, T0))
    allocations = Allocations()
    allocations.apply(record(quota="consumer_byte_rate",
                             enforcers=[{"enforcer": 1, "limit": Q}]), T0)
    local = LocalQuotas(EngineSettings(window_num=11, window_ms=1000, allocation_sample_ms=100),
                        engine.configs)
    local.obey(AllocatedLimits(allocations, lambda: 2))
    return local


def test_a_throttled_fetch_on_an_allocated_window_is_delivered_and_charged() -> None:
    # at the floor enforcer 2's window holds 0.05 Q x 1.1 s = 55 kB; the consumer's next record
    # batch is 200 kB. Emptied, as Kafka answers a throttled fetch, it would be fetched again at
    # the same size forever and show no demand: it is delivered, and muted for a span instead
    local = consumer_at_the_floor()
    assert local.request(2, T0, "PLAINTEXT", "alice", "app", "10.0.0.1", "Fetch", int(0.2 * Q),
                         0.0, False) == (1100, True)
    # its bytes stay in the window: a small fetch right after it is throttled, and delivered
    ms, kept = local.request(2, T0 + 10, "PLAINTEXT", "alice", "app", "10.0.0.1", "Fetch", 1000,
                             0.0, False)
    assert ms > 0 and kept
    # on enforcer 1, which holds the whole quota, the same batch fits: delivered, not throttled
    assert local.request(1, T0, "PLAINTEXT", "alice", "app", "10.0.0.1", "Fetch", int(0.2 * Q),
                         0.0, False) == (0, False)


def test_a_fetch_a_directive_throttles_is_answered_empty_even_on_an_allocated_window() -> None:
    # the enforcer's window is in debt (it would deliver a throttled fetch), and a directive
    # throttles alice's consumers: the directive wins, the response is emptied (fail closed)
    local = consumer_at_the_floor()
    local.request(2, T0, "PLAINTEXT", "alice", "app", "10.0.0.1", "Fetch", int(0.2 * Q), 0.0,
                  False)
    active = ActiveSet(broker_id=2)
    active.apply({"v": 1, "ts": T0, "scope": "cluster", "broker": None,
                  "entity": {"user": "alice", "client_id": ""}, "quota": "consumer_byte_rate",
                  "action": "throttle", "throttle_time_ms": 5000, "until": T0 + 5000,
                  "observed": 2.0, "limit": 1.0, "window_ms": 1000, "config_level": None}, T0)
    quota = RequestQuota(QuotaSources(active, local))
    throttle = quota.throttle(2, T0 + 10, "PLAINTEXT", "alice", "app", "10.0.0.1", "Fetch",
                              1000, 0.0, fetch=True)
    assert throttle.ms >= 5000 - 10 and throttle.empty


def test_a_fetch_is_capped_at_a_fiftieth_of_what_its_window_holds_at_the_enforcers_limit() -> None:
    local = consumer_at_the_floor()
    # (N-1) samples of 100 ms at the enforcer's allocation, a fiftieth of it
    assert local.fetch_cap(2, "alice", "app") == int(FLOOR_SHARE * Q * 1.0 / 50)
    assert local.fetch_cap(1, "alice", "app") == int(Q * 1.0 / 50)
    assert local.fetch_cap(1, "bob", "app") is None  # no consumer quota
    plain = LocalQuotas(EngineSettings(window_num=11, window_ms=1000), local.configs)
    assert plain.fetch_cap(1, "alice", "app") == int(Q * 10.0 / 50)  # Kafka's 10 s of quota


# -- the closed loop ----------------------------------------------------------------------------

def alice_phases(enforcement: str) -> tuple[dict[str, PhaseFigures], float]:
    """alice's figures per phase of the scenario, and what alice-etl got of what it offered
    while it shared alice's quota with the loader."""
    sc = load_scenario(SCENARIOS / "cluster-allocations.yaml").with_enforcement(enforcement)
    run = run_offline(sc, latency_ms=150)
    meter = run.world.meter
    row = next(r for r in meter.rows.values() if r.entity == "user=alice")
    figures = {p.name: meter.phase(row, p.start, p.end) for p in sc.phases}
    printed = phase_table(run.world, sc.phases, colour=False)
    assert [line.split()[0] for line in printed.splitlines() if "alice-etl" in line] == [
        "moved", "workers-stopped"]  # it starts with the move
    etl = run.world.client("alice-etl")
    moved = next(p for p in sc.phases if p.name == "moved")
    return figures, etl.stats.rate(moved.start, moved.end) / etl.spec.rate  # type: ignore[return-value]


def test_allocations_hold_the_rate_follow_the_traffic_keep_the_polite_share_and_survive_the_workers() -> None:
    alloc, alloc_etl = alice_phases("allocations")
    directives, directives_etl = alice_phases("directives")
    # 3x the quota across the 3 brokers: directives hold the mean but not the rate
    assert directives["spread"].p95_ratio > 2.0
    assert 0.9 <= alloc["spread"].mean_ratio <= 1.1 and alloc["spread"].p95_ratio <= 1.3
    # the loader moves to one broker: the shares follow it
    assert alloc["moved"].settled_s is not None and alloc["moved"].settled_s <= 3
    assert directives_etl < 0.7 <= 0.95 <= alloc_etl  # directives mute every client of alice
    # workers stop: no directive comes and alice's loader is unlimited; allocations, then the
    # static split, still hold her
    assert directives["workers-stopped"].mean_ratio > 2.5
    assert alloc["workers-stopped"].p95_ratio <= 1.05


def test_workers_stop_needs_a_positive_time() -> None:
    sc = load_scenario(SCENARIOS / "cluster-allocations.yaml")
    assert sc.workers_stop == 80 and sc.enforcement == "allocations"
    assert dataclasses.replace(sc, workers_stop=None).workers_stop is None


@dataclass
class PluginLoop:
    """`scenarios/plugin-uneven.yaml` offline: the loader's cluster-wide rate per second as a
    share of its quota, what etl got of what it offered, the reader's rate as a share of its
    quota, and how many requests timed out."""

    loader: list[float]
    etl: float
    reader: float
    timeouts: int


def plugin_loop() -> PluginLoop:
    sc = load_scenario(SCENARIOS / "plugin-uneven.yaml")
    run = run_offline(sc, latency_ms=1500)
    meter = run.world.meter
    loader = next(r for r in meter.rows.values() if r.entity == "client_id=loader")
    reader = next(r for r in meter.rows.values() if r.entity == "client_id=reader")
    assert loader.limit is not None and reader.limit is not None and sc.duration is not None
    etl = run.world.client("etl")
    return PluginLoop(
        [r / loader.limit for r in meter.per_second(loader, 0, int(sc.duration))],
        etl.stats.rate(sc.warmup, sc.duration) / etl.spec.rate,
        sum(meter.per_second(reader, int(sc.warmup), int(sc.duration)))
        / (sc.duration - sc.warmup) / reader.limit,
        sum(c.stats.timeouts for c in run.world.clients))


def test_brokers_running_the_plugin_hold_a_cluster_wide_quota_with_kafkas_own_windows() -> None:
    """Three brokers hold the loader's cluster quota with Kafka's 11 x 1 s windows and formula,
    reporting usage and throttles once a second; two librdkafka producers offer twice it over
    partitions led 3/2/1 in requests of up to 1 MB, then the leadership of broker 1's
    partitions moves to broker 3. Without the reported throttles the brokers muting their
    clients read as idle (the loader falls far below its quota, mutes run past the clients'
    request timeout); without the trims the brokers admit more than their allocations
    (several connections of one client, each muted alone, with 1 MB requests); with a
    consumer's trims measured over one window its brokers admit about 0.8 of its quota."""
    loop = plugin_loop()
    held = loop.loader[20:]
    assert 0.95 <= sum(held) / len(held) <= 1.05
    thirties = [sum(held[i:i + 30]) / 30 for i in range(0, len(held) - 29, 30)]
    assert 0.8 <= min(thirties) and max(thirties) <= 1.2, [round(r, 2) for r in thirties]
    assert loop.etl >= 0.95  # a client under its own quota gets what it offers
    assert loop.timeouts == 0
    # a consumer fetching its window's worth gets half its bound from Kafka's formula alone:
    # its brokers' bounds rise above their allocations until what they admit is their share
    assert loop.reader >= 0.85
