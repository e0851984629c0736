"""Idle windows: a window idle past the expiry starts afresh (as Kafka recreates an expired
sensor), so dropping idle windows from memory and the table never changes a decision."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings, strategies as st

from app.engine import state_codec
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import RequestEvent, parse_event
from app.engine.configs import ConfigUpdate, QuotaConfigs
from app.engine.stats import Rate
from tables.entity_state import PartitionCache
from tests.unit.engine.test_engine_properties import parsed, streams, view

T0 = 1_763_800_000_000
HOUR = 3_600_000


def produce(ts: int, nbytes: int, user: str = "alice") -> RequestEvent:
    event = parse_event({"v": 1, "type": "request", "ts": ts, "broker": 1, "user": user,
                         "client_id": "app", "api": "Produce", "bytes": nbytes})
    assert isinstance(event, RequestEvent)
    return event


def limits(**rates: int) -> QuotaConfigs:
    configs = QuotaConfigs()
    for user, rate in rates.items():
        update = parse_event({"v": 1, "type": "quota_config", "ts": 0, "entity": {"user": user},
                              "quotas": {"producer_byte_rate": rate}})
        assert isinstance(update, ConfigUpdate)
        configs.apply(update)
    return configs


def test_a_window_idle_past_the_expiry_decides_like_a_new_one() -> None:
    before = [produce(T0 + i * 300, 5_000) for i in range(20)]
    after = [produce(T0 + 2 * HOUR + i * 300, 5_000) for i in range(20)]
    kept = QuotaEngine(EngineSettings(), limits(alice=10_000))
    for event in before:
        kept.process(event)
    fresh = QuotaEngine(EngineSettings(), limits(alice=10_000))
    assert [[view(d) for d in kept.process(e)[0]] for e in after] == \
        [[view(d) for d in fresh.process(e)[0]] for e in after]
    # and it is one: none of the old samples is left (Kafka would have a new sensor)
    rates = [s for s in kept.store.values() if isinstance(s, Rate)]
    assert rates and all(start >= T0 + 2 * HOUR for r in rates for _, start, _ in r.samples())


def test_expire_drops_idle_windows_only_and_not_one_under_a_directive() -> None:
    engine = QuotaEngine(EngineSettings(), limits(alice=1_000, bob=1_000_000))
    engine.process(produce(T0, 10, "bob"))
    _, directives = engine.process(produce(T0, 10**9, "alice"))  # throttled for a long time
    assert directives and directives[0]["until"] > T0 + 2 * HOUR
    assert engine.expire(T0 + HOUR) == []  # exactly an hour: not idle yet
    gone = engine.expire(T0 + 2 * HOUR)
    assert gone == ["P\x1f1\x1fbob\x1f"]  # bob's produce window; alice's is under a directive
    assert list(engine.store) == ["P\x1f1\x1falice\x1f"]


@settings(max_examples=150, deadline=None)
@given(streams(), st.data())
def test_expiring_at_any_moment_changes_no_decision(stream: list[dict[str, Any]],
                                                    data: st.DataObject) -> None:
    """Sweeps at random points of a stream with idle gaps: the same decisions and directives
    as never sweeping, and as a fresh engine for every window past its expiry."""
    gaps = set(data.draw(st.lists(st.integers(0, len(stream)), max_size=3)))
    shift = 0
    for i, record in enumerate(stream):
        if i in gaps:
            shift += data.draw(st.sampled_from([500, 3_000, 10_000]))
        record["ts"] += shift
    shifted = parsed(stream)
    sweeps = set(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    quiet = QuotaEngine(EngineSettings(idle_expiry_ms=2_000))
    swept = QuotaEngine(EngineSettings(idle_expiry_ms=2_000))
    for i, event in enumerate(shifted):
        a = quiet.process(event)
        b = swept.process(event)
        assert [view(d) for d in a[0]] == [view(d) for d in b[0]] and a[1] == b[1]
        if i in sweeps and not isinstance(event, ConfigUpdate):
            swept.expire(event.ts)


class Bytes(dict):
    """A partition store in memory: what the flush wrote, by key."""

    def items(self) -> Any:  # type: ignore[override]
        return [(k, v) for k, v in super().items()]


def test_partition_cache_writes_each_window_and_a_tombstone_per_expired_one() -> None:
    store = Bytes()
    writes: list[tuple[str, bytes | None]] = []

    def write(key: str, value: bytes | None) -> None:
        writes.append((key, value))
        if value is None:
            store.pop(key.encode(), None)
        else:
            store[key.encode()] = value

    cache = PartitionCache(store, sweep_every_ms=600_000)
    engine = QuotaEngine(EngineSettings(), limits(alice=1_000), store=cache)
    for user in ("alice", "bob", "carol"):
        engine.process(produce(T0, 100, user))
    cache.mark(engine.drain_touched())
    changes = cache.flush()
    for key, value in changes:
        write(key, value)
    assert len(changes) == 3  # a produce window per user
    assert all(v for _, v in writes) and len({k for k, _ in writes}) == 3
    writes.clear()
    engine.process(produce(T0 + 2 * HOUR, 100, "carol"))  # alice and bob are idle
    cache.mark(engine.drain_touched())
    assert cache.sweeps.due(T0 + 2 * HOUR) and not cache.sweeps.due(T0 + 2 * HOUR + 1)
    gone = engine.expire(T0 + 2 * HOUR)
    assert len(gone) == 2
    changes = cache.flush()
    for key, value in changes:
        write(key, value)
    assert sorted(v is None for _, v in changes) == [False, True, True]
    assert sorted(k for k, v in writes if v is None) == sorted(gone)
    assert len(store) == 1 and all(b"carol" in k for k in store)
    # a restarted worker reads every window the partition holds, and only those
    again = PartitionCache(store)
    assert again.load_all() == 1
    assert all(isinstance(state_codec.encode(s), bytes) for s in again.states.values())
    assert again.get(gone[0]) is None


def test_a_dropped_window_is_not_read_back_before_its_tombstone_is_written() -> None:
    store = Bytes()
    cache = PartitionCache(store)
    rate = Rate()
    rate.record(1.0, T0, 11, 1000)
    store[b"k"] = state_codec.encode(rate)
    assert cache.get("k") is not None
    del cache["k"]
    assert cache.get("k") is None and "k" in cache.deleted
    cache["k"] = Rate()
    assert [(k, v is None) for k, v in cache.flush()] == [("k", False)]


def test_the_resolution_caches_are_bounded_and_bounding_them_changes_no_decision() -> None:
    """A principal's resolution and windows are cached, not state: past MAX_RESOLVED principals
    the caches start afresh (a million principals kept ~1.7 kB each of them before), and a
    principal resolved again decides as before."""
    from app.engine.configs import MAX_RESOLVED

    def run(principals: int) -> tuple[QuotaEngine, list[Any]]:
        engine = QuotaEngine(EngineSettings(), limits(alice=10_000))
        out = [engine.process(produce(T0, 80_000))[0]]
        for p in range(principals):
            engine.process(produce(T0 + 1 + p // 1000, 100, user=f"u{p}"))
        out.append(engine.process(produce(T0 + 500, 80_000))[0])  # alice, resolved afresh
        return engine, [[(d.quota, d.throttle_time_ms, d.observed) for d in ds] for ds in out]

    many, decided = run(MAX_RESOLVED + 10)
    assert len(many._principals) <= MAX_RESOLVED  # the engine's own cache
    assert len(many._configs._cache) <= MAX_RESOLVED  # the configs' resolutions
    assert decided == run(0)[1] and decided[1][0][1] > 0  # alice throttled, as without them
