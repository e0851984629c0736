"""The config timeline: which configs are in force for an event, whatever order they were added in."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.configs import PRODUCE, ConfigUpdate, QuotaConfigs, parse_config_record
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import RequestEvent
from app.engine.kafka_math import UNLIMITED
from app.engine.timeline import NEVER, ConfigTimeline
from app.kafka.config_follower import ConfigFollower
from app.intake.replay import replay
from app.signing import Signing

GRACE = 50


def update(user: str, rate: float, ts: int) -> ConfigUpdate:
    return replace(parse_config_record({"entity": {"user": user}, "quotas": {PRODUCE: rate}}), ts=ts)


def limit(configs: QuotaConfigs, user: str = "alice") -> float | None:
    """The user's producer quota; None if it has none (no quota, or others' only)."""
    res = configs.resolve(PRODUCE, user, "app")
    return None if res is None or res.limit >= UNLIMITED else res.limit


def test_an_event_sees_the_configs_with_ts_up_to_its_own() -> None:
    timeline = ConfigTimeline()
    timeline.add(update("alice", 300, 3000))
    timeline.add(update("alice", 100, 1000))  # added later, older: still in force from 1000
    assert limit(timeline.at(999).configs) is None
    assert limit(timeline.at(1000).configs) == 100
    assert limit(timeline.at(2999).configs) == 100
    assert limit(timeline.at(3000).configs) == 300
    assert limit(timeline.latest) == 300


def test_equal_ts_apply_in_the_order_added() -> None:
    timeline = ConfigTimeline()
    timeline.add(update("alice", 100, 1000))
    timeline.add(update("alice", 200, 1000))
    assert limit(timeline.at(1000).configs) == 200


def test_a_late_config_counts_from_its_arrival_and_never_overrides_a_newer_ts() -> None:
    timeline = ConfigTimeline(grace_ms=GRACE)
    assert not timeline.add(update("alice", 100, 1000), arrival=1010)  # within half the grace
    assert timeline.add(update("bob", 500, 1000), arrival=5000)  # late
    assert not timeline.add(update("alice", 300, 2000), arrival=2000)
    assert timeline.add(update("alice", 900, 1500), arrival=6000)  # late, and older than 2000
    assert limit(timeline.at(1000, arrival=1000).configs) == 100  # 1010 - 25 <= 1000
    assert limit(timeline.at(4000, arrival=4000).configs, "bob") is None
    assert limit(timeline.at(4000, arrival=4975).configs, "bob") == 500
    assert limit(timeline.at(1600, arrival=6000).configs) == 900
    assert limit(timeline.at(2000, arrival=6000).configs) == 300
    # without an arrival (a file) only the ts counts
    assert limit(timeline.at(1000).configs, "bob") == 500


def brute_force(entries: list[tuple[ConfigUpdate, int | None]], t: int, arrival: int
                ) -> QuotaConfigs:
    """The rule written out: updates with ts <= t that were known by `arrival`, in ts order
    (the order added for equal ts)."""
    configs = QuotaConfigs()
    known = [(u, NEVER if a is None else a - GRACE // 2) for u, a in entries]
    for u, _ in sorted(((u, k) for u, k in known if u.ts <= t and k <= arrival),
                       key=lambda p: p[0].ts):
        configs.apply(u)
    return configs


entry = st.tuples(st.sampled_from(["alice", "bob"]), st.integers(1, 9), st.integers(0, 20),
                  st.one_of(st.none(), st.integers(0, 30)))


@settings(max_examples=200, deadline=None)
@given(st.lists(entry, max_size=12), st.lists(st.tuples(st.integers(-1, 25), st.integers(-1, 35)),
                                              min_size=1, max_size=30))
def test_snapshots_equal_the_rule_for_any_sequence_of_lookups(
        raw: list[tuple[str, int, int, int | None]], lookups: list[tuple[int, int]]) -> None:
    """Snapshots built on the last one (the cheap path) must equal a build from scratch."""
    entries = [(update(user, rate, ts), arrival) for user, rate, ts, arrival in raw]
    timeline = ConfigTimeline(grace_ms=GRACE)
    for u, arrival in entries:
        timeline.add(u, arrival)
    for t, arrival in lookups:
        want = brute_force(entries, t, arrival)
        got = timeline.at(t, arrival).configs
        assert [limit(got, user) for user in ("alice", "bob")] == \
            [limit(want, user) for user in ("alice", "bob")]
    states = timeline.states(max_updates=64)
    assert states is not None
    listed = {(limit(c, "alice"), limit(c, "bob")) for c in states}
    for t, arrival in lookups:
        got = timeline.at(t, arrival).configs
        assert (limit(got, "alice"), limit(got, "bob")) in listed


def test_states_are_prefixes_in_time_order_when_arrivals_follow_it() -> None:
    timeline = ConfigTimeline(grace_ms=GRACE)
    for i, rate in enumerate((10, 20, 30)):
        timeline.add(update("alice", rate, 1000 * i), arrival=1000 * i)
    states = timeline.states(max_updates=0)  # prefixes need no grid, whatever the bound
    assert states is not None and [limit(c) for c in states] == [None, 10, 20, 30]
    timeline.add(update("alice", 40, 500), arrival=9000)  # out of order
    assert timeline.states(max_updates=3) is None  # too many to list: the caller assumes any


def test_the_engine_judges_each_event_by_the_configs_at_its_ts() -> None:
    engine = QuotaEngine(EngineSettings(window_ms=1000))
    engine.add_config(update("alice", 1000, 5000))
    engine.add_config(update("alice", 10**9, 0))

    def throttle(ts: int) -> int:
        event = RequestEvent(ts, 1, "", "alice", "app", "", "Produce", 50_000, 0.0, 0.0, False, 1)
        decisions, _ = engine.process(event)
        return max(d.throttle_time_ms for d in decisions)

    assert throttle(1000) == 0  # before 5000 the quota is huge
    assert throttle(5000) > 0


def request(ts: int, nbytes: int = 8_000) -> bytes:
    return orjson.dumps({"type": "request", "v": 1, "ts": ts, "broker": 1, "user": "alice",
                         "client_id": "app", "api": "Produce", "bytes": nbytes})


def config_line(ts: int, rate: int) -> bytes:
    return orjson.dumps({"type": "quota_config", "v": 1, "ts": ts, "entity": {"user": "alice"},
                         "quotas": {"producer_byte_rate": rate}})


def test_replay_applies_a_config_line_by_its_ts_not_its_position() -> None:
    events = [request(10_000 + 100 * i) for i in range(60)]
    configs = [config_line(0, 100_000), config_line(13_000, 20_000)]

    def directives(lines: list[bytes]) -> list[bytes]:
        return [orjson.dumps(d) for r in replay(lines, EngineSettings()) for d in r.directives]

    first = directives(configs + events)
    assert first and min(orjson.loads(d)["ts"] for d in first) >= 13_000
    assert directives(events + configs) == first
    assert directives(events[:20] + configs + events[20:]) == first
    outputs = [r.output for r in replay(events + configs, EngineSettings())]
    assert outputs[-1] == {"index": 61, "throttle_time_ms": 0, "decisions": []}


def test_replay_refuses_a_config_older_than_one_of_its_key_before_it() -> None:
    """As the workers do (`newest_configs`): after the config of ts 13000, the one of ts 0 for
    the same entity and quota is stale, whatever the events."""
    events = [request(10_000 + 100 * i) for i in range(60)]
    newer, older = config_line(13_000, 20_000), config_line(0, 1_000)
    results = list(replay([newer, older] + events, EngineSettings()))
    assert results[1].output["error"].startswith("stale_config: ts 0 is older than 13000")
    assert [reason.split(":")[0] for reason, _ in results[1].bad] == ["stale_config"]
    got = [d for r in results for d in r.directives]
    alone = [d for r in replay([newer] + events, EngineSettings()) for d in r.directives]
    assert got and got == alone


def test_follower_counts_late_and_missed_configs() -> None:
    timeline = ConfigTimeline(grace_ms=GRACE)
    follower = ConfigFollower("", "cfg", timeline, signing=Signing())
    follower.apply(config_line(1000, 10), arrival=1010)
    assert (follower.applied, follower.late, follower.missed) == (1, 0, 0)
    follower.released(2000, 1990)  # the agents judged events up to here
    follower.apply(config_line(1500, 20), arrival=2020)  # in Kafka (less grace/2) by 1995
    assert (follower.late, follower.missed) == (1, 1)
    follower.apply(config_line(2500, 30), arrival=2500)  # newer than what was judged: fine
    follower.apply(b"{", arrival=2600)
    assert (follower.applied, follower.late, follower.missed, follower.bad) == (3, 1, 1, 1)


def test_wait_confirmed_returns_once_the_watermark_passes_or_the_wait_ends() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        follower = ConfigFollower("", "cfg", ConfigTimeline(), signing=Signing())
        follower._advance(1000)
        already = await follower.wait_confirmed(900, 0.01)
        waiting = asyncio.create_task(follower.wait_confirmed(1500, 5.0))
        await asyncio.sleep(0.01)
        follower._advance(1200)
        await asyncio.sleep(0.01)
        assert not waiting.done()
        follower._advance(1600)
        passed = await waiting
        expired = await follower.wait_confirmed(5000, 0.02)
        return already, passed, expired

    assert asyncio.run(scenario()) == (True, True, False)


class _Polled:
    """What `ConfigFollower._confirm` reads of a consumer: per partition, the high watermark,
    when its last fetch was processed, and the position."""

    def __init__(self, parts: dict[int, tuple[int, int | None, int]]) -> None:
        self.parts = parts

    def highwater(self, tp: Any) -> int:
        return self.parts[tp][0]

    def last_poll_timestamp(self, tp: Any) -> int | None:
        return self.parts[tp][1]

    async def position(self, tp: Any) -> int:
        return self.parts[tp][2]


def test_the_watermark_is_the_oldest_fetch_less_its_wait_once_every_partition_is_read() -> None:
    async def confirmed(parts: dict[int, tuple[int, int | None, int]], poll_ms: int) -> int:
        follower = ConfigFollower("", "cfg", ConfigTimeline(), signing=Signing(), poll_ms=poll_ms)
        await follower._confirm(_Polled(parts), list(parts))  # type: ignore[arg-type]
        return follower.confirmed_ms

    read = {0: (5, 10_000, 5), 1: (3, 10_040, 3)}
    assert asyncio.run(confirmed(read, 5)) == 10_000 - 5
    assert asyncio.run(confirmed(read, 2)) == 10_000 - 2
    behind = {0: (5, 10_000, 4), 1: (3, 10_040, 3)}  # records left to read: no advance
    assert asyncio.run(confirmed(behind, 5)) == 0
    unpolled = {0: (5, 10_000, 5), 1: (3, None, 3)}  # a partition not fetched yet: no advance
    assert asyncio.run(confirmed(unpolled, 5)) == 0
