"""The closed loop without Kafka: the simulated world against the pure engine, in simulated time.

Each flush interval the brokers' records (the ones the live run sends, `app.usage.records`) go
through the intake and the engine (what a worker runs), and the directives reach every broker's
`ActiveSet` `latency_ms` later. It runs a minute of scenario in well under a second,
deterministically, so tests can check the model and the loop's dynamics, and `simulate --offline`
can show what a given pipeline latency alone does to enforcement.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from typing import Any

from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.timeline import FOREVER
from app.intake.apply import apply
from app.intake.clock import StreamClock
from app.intake.records import Decoded, decode_source
from app.intake.stream import StreamIntake
from app.sim.scenario import ALLOCATING, Scenario
from app.sim.world import World
from app.subscriber.active_set import ActiveSet
from app.usage.records import RecordEncoder

T0 = 1_763_800_000_000


@dataclass
class OfflineRun:
    world: World
    start_ms: float
    end_ms: float
    directives: list[dict[str, Any]]
    events: int


def run_offline(scenario: Scenario, latency_ms: int = 100, settings: EngineSettings | None = None,
                step_ms: int = 10, start_ms: int = T0, duration: float | None = None) -> OfflineRun:
    """Run `scenario` for `duration` (default: its own) with a fixed loop latency."""
    seconds = duration if duration is not None else scenario.duration
    if seconds is None:
        raise ValueError("an offline run needs a duration")
    settings = replace(settings or EngineSettings(scope=scenario.scope, accounting=scenario.accounting),
                       allocations=scenario.enforcement in ALLOCATING,
                       enforcer_window_ms=scenario.enforcer_window_ms)
    sets = {b: ActiveSet(b) for b in scenario.brokers}
    world = World(scenario, sets, start_ms, settings)
    engine = QuotaEngine(settings)
    stop = scenario.workers_stop  # then nobody reads the events any more
    workers_stop = float("inf") if stop is None else start_ms + stop * 1000.0
    for update in scenario.config_updates(start_ms):
        engine.process(update)
    in_flight: deque[tuple[float, dict[str, Any]]] = deque()
    published: list[dict[str, Any]] = []
    end = start_ms + seconds * 1000.0
    t = float(start_ms)
    next_flush = start_ms + scenario.flush_interval_ms
    events = 0
    intake: StreamIntake[None] = StreamIntake(StreamClock())
    encoder = RecordEncoder(columnar=True, drops=world.drops)

    def run(judged: list[tuple[Decoded, None]], now: float) -> int:
        """The judged records through the engine; their directives in flight from `now`."""
        n = 0
        for decoded, _ in judged:
            n += len(decoded.requests) + len(decoded.others)
            for directive in apply(engine, decoded)[0]:
                published.append(directive)
                in_flight.append((now + latency_ms, directive))
        return n

    while t < end:
        t = min(t + step_ms, end)
        while in_flight and in_flight[0][0] <= t:
            directive = in_flight.popleft()[1]
            for active in sets.values():
                active.apply(directive, int(t))
        world.advance(t)
        if t >= next_flush or t == end:
            next_flush += scenario.flush_interval_ms
            if t >= workers_stop:
                world.flush()  # nobody reads the events: no directive or allocation comes
                continue
            for _, spans in world.flush():
                for record in encoder.records(spans):
                    events += run(intake.offer(decode_source(record.value, FOREVER), None), t)
    events += run(intake.finish(), end)
    return OfflineRun(world, float(start_ms), end, published, events)
