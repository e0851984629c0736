"""The live run: the simulated world against the real pipeline, in real time.

Thin Kafka I/O around the pure model: every flush interval, each broker's events go to the event
topics with an `AIOKafkaProducer`, one record per event kind keyed by the broker
(`app.usage.publisher`), and each simulated broker answers its clients from its
own `DirectiveSubscriber` (broker_id = its id) reading the control topic, exactly as a real
broker embedding the subscriber would. The world's clock is the wall clock (epoch ms), the time
base of events and directives.

The world runs in ticks, so an action is decided up to a tick after its time, later still when
the process is short of CPU. A directive applied in between would reach back to actions that
happened before it arrived: a close_connection, say, would close connections accepted before
it. So the subscribers' clock first runs the world up to the moment their fetched directives
are applied (`LiveRun.clock`), and every action is decided with the directives it would have
seen.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from app.admin.config_topic import write_records
from app.engine.engine import EngineSettings
from app.admin.entities import canonical_record
from app.kafka.clients import producer
from app.kafka.security import KafkaSecurity
from app.settings import Settings
from app.signing import Signing
from app.sim.broker import CONNECTION, MUTATION, REQUEST
from app.sim.scenario import ALLOCATING, Scenario
from app.sim.world import World
from app.subscriber.consumer import DirectiveSubscriber, wall_clock_ms
from app.usage.drops import Drops
from app.usage.publisher import EventPublisher, Source
from app.usage.records import RecordEncoder

TICK_S = 0.01  # how often due actions run; actions keep their own exact times

#: Called once a second with the run and the time; may be a coroutine function.
OnSecond = Callable[["LiveRun", float], Any]


async def write_configs(bootstrap: str, topic: str, scenario: Any, ts: int, *,
                        signing: Signing, security: KafkaSecurity) -> int:
    """Write a scenario's quotas (its `config_updates`) as `quota-streams quotas --alter`
    would; returns how many."""
    updates = scenario.config_updates(ts)
    if updates:
        await write_records(bootstrap, topic, [(canonical_record(u), u) for u in updates], None,
                            signing=signing, security=security)
    return len(updates)


@dataclass
class LiveRun:
    """One run of a scenario against a running pipeline (topics and workers already up)."""

    scenario: Scenario
    bootstrap: str
    settings: Settings
    #: the pipeline's (`Pipeline`): how to reach Kafka, the keys directives are sealed with
    security: KafkaSecurity = field(kw_only=True)
    signing: Signing = field(kw_only=True)
    on_second: OnSecond | None = None
    world: World | None = None
    start_ms: float = 0.0
    end_ms: float = 0.0
    records_sent: int = 0
    events_sent: int = 0
    #: events the brokers or the producer dropped, by reason
    drops: Drops = field(default_factory=Drops)
    subscribers: dict[int, DirectiveSubscriber] = field(default_factory=dict)
    _end: float | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self) -> None:
        """End the run at the next tick (the report covers what ran)."""
        self.stopping.set()

    async def run(self) -> World:
        s = self.settings
        topics = {REQUEST: s.topic_request, CONNECTION: s.topic_connection,
                  MUTATION: s.topic_mutation}
        async with producer(self.bootstrap, security=self.security, acks=1) as p:
            try:
                await self._start_subscribers()
                await self._loop(EventPublisher(p, topics, RecordEncoder(
                    s.event_format == "columnar", s.event_record_bytes,
                    self.drops)))
                await p.flush()
            finally:
                for sub in self.subscribers.values():
                    await sub.stop()
        assert self.world is not None
        return self.world

    async def _start_subscribers(self) -> None:
        for b in self.scenario.brokers:
            sub = DirectiveSubscriber(self.bootstrap, b, topic=self.settings.topic_directives,
                                      signing=self.signing, security=self.security,
                                      clock=self.clock, poll_timeout_ms=100,
                                      consumer_options={"fetch_max_wait_ms": 50})
            self.subscribers[b] = sub
            await sub.start()
        await asyncio.gather(*(s.wait_ready(timeout=60) for s in self.subscribers.values()))

    def _engine(self) -> EngineSettings | None:
        """The workers' settings when brokers enforce allocations themselves."""
        if self.scenario.enforcement not in ALLOCATING:
            return None
        return self.settings.engine()

    def clock(self) -> int:
        """The subscribers' clock: the wall clock, once the world has run every action due by
        then (they read it right before applying what they fetched)."""
        now = wall_clock_ms()
        world = self.world
        if world is not None:
            until = float(now) if self._end is None else min(float(now), self._end)
            if until > world.now:
                world.advance(until)
        return now

    async def _loop(self, publisher: EventPublisher) -> None:
        sc = self.scenario
        self.start_ms = start = float(wall_clock_ms())
        world = self.world = World(sc, self.subscribers, start, self._engine(), self.drops)
        end = self._end = None if sc.duration is None else start + sc.duration * 1000.0
        flush_ms = sc.flush_interval_ms
        next_flush, next_second = start + flush_ms, start + 1000.0
        while True:
            now = float(wall_clock_ms())
            last = self.stopping.is_set() or (end is not None and now >= end)
            if end is not None:
                now = min(now, end)
            world.advance(now)
            if now >= next_flush or last:
                await self._send(publisher, world)
                next_flush = max(next_flush + flush_ms, now + flush_ms / 2)
            if now >= next_second:
                next_second += 1000.0
                if self.on_second is not None:
                    result = self.on_second(self, now)
                    if inspect.isawaitable(result):
                        await result
            if last:
                break
            await asyncio.sleep(TICK_S)
        self.end_ms = world.now

    async def _send(self, publisher: EventPublisher, world: World) -> None:
        """Send each broker's events, keyed by the broker (`EventPublisher`)."""
        before = publisher.events
        for broker, spans in world.flush():
            self.records_sent += await publisher.send(Source.broker(broker), spans)
        self.events_sent += publisher.events - before
