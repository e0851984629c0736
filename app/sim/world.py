"""The simulated cluster: brokers, clients and a scheduler, all driven by the time given.

`World.advance(now)` runs every action due up to `now` in time order; `World.flush()` takes the
events the brokers recorded. Nothing here reads a clock or does I/O: the live runner calls these
with the wall clock and sends the records; unit tests call them with made-up times.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from typing import Any

from app.enforcement.local import LocalQuotas, broker_settings
from app.engine.engine import EngineSettings
from app.sim.broker import Directives, SimBroker
from app.sim.clients import Actor, Client
from app.sim.meter import Meter
from app.sim.scenario import Scenario
from app.subscriber.allocations import AllocatedLimits
from app.usage.drops import Drops
from app.usage.recorder import Span


class World:
    def __init__(self, scenario: Scenario, directives: Mapping[int, Directives],
                 start_ms: float, engine: EngineSettings | None = None,
                 drops: Drops | None = None) -> None:
        """`engine`: the workers' settings; with allocations, each broker enforces its
        allocation itself (`LocalQuotas` over the allocations its `directives` read).
        `drops`: where the brokers count the events they could not keep."""
        self.scenario = scenario
        self.drops = Drops() if drops is None else drops
        self.start_ms = start_ms
        self.now = start_ms
        self.meter = Meter(scenario.quota_configs(), start_ms)
        self._heap: list[tuple[float, int, Any]] = []
        self._seq = itertools.count()
        self.brokers = {b: SimBroker(b, scenario.listeners, directives[b], self.meter,
                                     self.schedule, scenario.aggregate,
                                     self._local(engine, directives[b]),
                                     scenario.flush_interval_ms, self.drops,
                                     per_second=scenario.enforcement == "plugin")
                        for b in scenario.brokers}
        self.clients = [Client(spec, self) for spec in scenario.clients]
        for client in self.clients:
            self.schedule(start_ms + client.spec.start * 1000.0, client)

    def _local(self, engine: EngineSettings | None, directives: Directives) -> LocalQuotas | None:
        """A broker's own quota managers over its allocations, or None (directives only): the
        gateways' (short windows, a debt), or with the plugin Kafka's own (its window and
        formula, the allocation as the bound)."""
        if engine is None or not engine.allocations:
            return None
        live = len(self.scenario.brokers)
        local = LocalQuotas(broker_settings(engine), self.scenario.quota_configs())
        local.obey(AllocatedLimits(directives.allocations, lambda: live,  # type: ignore[attr-defined]
                                   kafka_formula=self.scenario.enforcement == "plugin"))
        return local

    def schedule(self, t: float, actor: Actor) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), actor))

    def advance(self, now: float) -> int:
        """Run every action due at or before `now`; return how many ran. The clock never goes
        back: a `now` before the world's is a no-op."""
        heap, ran = self._heap, 0
        while heap and heap[0][0] <= now:
            t, _, actor = heapq.heappop(heap)
            nxt = actor.act(t)
            ran += 1
            if nxt is not None:
                heapq.heappush(heap, (nxt, next(self._seq), actor))
        if now > self.now:
            self.now = now
        return ran

    def flush(self) -> list[tuple[int, list[Span]]]:
        """Every broker's events since the last flush: (broker id, its spans), for the brokers
        that recorded any."""
        out = []
        for broker_id, broker in self.brokers.items():
            spans = broker.flush()
            if spans:
                out.append((broker_id, spans))
        return out

    def client(self, name: str) -> Client:
        return next(c for c in self.clients if c.spec.name == name)
