"""What a reader sees of the engine's windows without changing them: `Rate.peek` is `measure`
on a copy, and a window's `observed` is its latest check whichever principal made it."""

from __future__ import annotations

import copy

from hypothesis import given, settings, strategies as st

from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import RequestEvent, parse_event
from app.engine.stats import Rate
from tests.unit.engine.test_idle_expiry import limits

T0 = 1_763_800_000_000


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3_000), st.floats(-5e3, 1e6, allow_nan=False)),
                min_size=0, max_size=40),
       st.integers(0, 40_000), st.integers(1, 12), st.sampled_from([100, 1000]))
def test_peek_is_measure_on_a_copy_and_changes_nothing(steps: list[tuple[int, float]], later: int,
                                                       n: int, w: int) -> None:
    rate = Rate()
    t = T0
    for gap, value in steps:
        t += gap
        rate.record_measure(value, t, n, w)
    before = (rate.samples(), rate.current, rate.clock)
    now = t + later
    assert rate.peek(now, n, w) == copy.deepcopy(rate).measure(now, n, w)[0]
    assert (rate.samples(), rate.current, rate.clock) == before


def produce(ts: int, client: str, nbytes: int) -> RequestEvent:
    event = parse_event({"v": 1, "type": "request", "ts": ts, "broker": 1, "user": "alice",
                         "client_id": client, "api": "Produce", "bytes": nbytes})
    assert isinstance(event, RequestEvent)
    return event


def test_principals_of_one_window_share_its_latest_check() -> None:
    """alice's two client ids feed her user quota's one window: what a driver reads of that
    window after a batch (`drain_windows`) is the last check, from either client id."""
    engine = QuotaEngine(EngineSettings(scope="broker"), limits(alice=10_000))
    last = None
    for i, client in enumerate(["app-1", "app-2", "app-2", "app-1"]):
        decisions, _ = engine.process(produce(T0 + 100 * i, client, 3_000 + 1_000 * i))
        (last,) = decisions
    windows = engine.drain_windows()
    engine.drain_touched()  # as a driver does after each batch
    assert last is not None
    assert [w.observed for w in windows.values()] == [last.observed]
    engine.process(produce(T0 + 900, "app-1", 50_000))
    (window,) = engine.drain_windows().values()
    assert window.observed > last.observed
