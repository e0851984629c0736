"""Readers of the control and config topics never die unnoticed: a crash restarts them after a
backoff (counted, `healthy` False meanwhile) or hands the crash to an owner that exits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import generate_latest

from app.contract.keys import directive_key
from app.engine.timeline import ConfigTimeline
from app.gateway.config import GatewayConfig
from app.gateway.server import Gateway
from app.kafka.config_follower import ConfigFollower
from app.kafka.security import PLAINTEXT
from app.kafka.supervision import Supervised, Supervision
from app.signing import Signing
from app.subscriber.consumer import DirectiveSubscriber

TS = 1_763_800_000_000
TP = TopicPartition("t", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sleeps:
    """An injected sleep: records each wait and returns at once, or holds until `release`."""

    def __init__(self, hold: bool = False) -> None:
        self.waits: list[float] = []
        self.waiting = asyncio.Event()
        self.released = asyncio.Event()
        if not hold:
            self.released.set()

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.waiting.set()
        await self.released.wait()


def crashing(times: int, running: asyncio.Event,
             between: Callable[[], None] = lambda: None) -> Callable[[], Awaitable[None]]:
    """A reader loop that raises on its first `times` runs, then runs until cancelled."""
    runs = 0

    async def run() -> None:
        nonlocal runs
        runs += 1
        between()
        if runs <= times:
            raise RuntimeError(f"injected crash {runs}")
        running.set()
        await asyncio.Event().wait()

    return run


async def test_a_crashed_reader_restarts_with_a_doubling_backoff_and_is_counted() -> None:
    running, crashes, sleeps = asyncio.Event(), [], Sleeps()
    reader = Supervised("reader", crashing(4, running),
                        Supervision(on_crash=crashes.append, first_backoff_s=1, max_backoff_s=3),
                        clock=Clock(), sleep=sleeps)
    reader.start()
    await asyncio.wait_for(running.wait(), 5)
    assert sleeps.waits == [1, 2, 3, 3]
    assert reader.crashes == 4 and [str(e) for e in crashes][-1] == "injected crash 4"
    assert reader.healthy
    await reader.stop()
    assert not reader.healthy


async def test_a_run_that_lasted_the_longest_backoff_starts_the_backoff_afresh() -> None:
    clock, running, sleeps = Clock(), asyncio.Event(), Sleeps()

    def an_hour_passes() -> None:
        clock.now += 3600

    reader = Supervised("reader", crashing(2, running, an_hour_passes),
                        Supervision(first_backoff_s=1, max_backoff_s=30), clock=clock,
                        sleep=sleeps)
    reader.start()
    await asyncio.wait_for(running.wait(), 5)
    assert sleeps.waits == [1, 1]
    await reader.stop()


async def test_a_reader_is_not_healthy_while_it_waits_to_restart() -> None:
    running, sleeps = asyncio.Event(), Sleeps(hold=True)
    reader = Supervised("reader", crashing(1, running), clock=Clock(), sleep=sleeps)
    reader.start()
    await asyncio.wait_for(sleeps.waiting.wait(), 5)
    assert not reader.healthy and reader.crashes == 1
    sleeps.released.set()
    await asyncio.wait_for(running.wait(), 5)
    assert reader.healthy
    await reader.stop()


async def test_an_owner_that_gives_up_gets_the_crash_and_nothing_restarts() -> None:
    running, given_up, sleeps = asyncio.Event(), [], Sleeps()

    async def give_up(exc: BaseException) -> None:
        given_up.append(exc)

    reader = Supervised("reader", crashing(1, running), Supervision(give_up=give_up),
                        clock=Clock(), sleep=sleeps)
    reader.start()
    assert reader._task is not None
    await asyncio.wait_for(reader._task, 5)
    assert [str(e) for e in given_up] == ["injected crash 1"]
    assert not running.is_set() and sleeps.waits == [] and not reader.healthy


async def test_a_reader_loop_that_returns_is_a_crash() -> None:
    crashes: list[BaseException] = []
    done = asyncio.Event()

    async def returns() -> None:
        if crashes:
            done.set()
            await asyncio.Event().wait()

    reader = Supervised("reader", returns, Supervision(on_crash=crashes.append),
                        clock=Clock(), sleep=Sleeps())
    reader.start()
    await asyncio.wait_for(done.wait(), 5)
    assert len(crashes) == 1 and "must not end" in str(crashes[0])
    await reader.stop()


class FakeConsumer:
    """Hands out scripted batches (or raises) on each poll, then waits; every partition is read
    to its end."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.offset = 0
        self.drained = asyncio.Event()

    async def getmany(self, *_tps: Any, **_kwargs: Any) -> dict[TopicPartition, list[Any]]:
        if not self.script:
            self.drained.set()
            await asyncio.Event().wait()
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        self.offset += sum(len(records) for records in step.values())
        return step

    async def position(self, _tp: TopicPartition) -> int:
        return self.offset

    def highwater(self, _tp: TopicPartition) -> int:
        return self.offset

    def last_poll_timestamp(self, _tp: TopicPartition) -> int:
        return TS

    async def stop(self) -> None:
        pass


def config_record(offset: int, user: str) -> ConsumerRecord:
    value = orjson.dumps({"type": "quota_config", "v": 1, "ts": TS + offset,
                          "entity": {"user": user}, "quotas": {"producer_byte_rate": 1000}})
    return ConsumerRecord("t", 0, offset, TS + offset, 0, None, value, None, 0, len(value), ())


async def test_a_config_follower_that_crashes_restarts_and_reads_on() -> None:
    """A fetch that fails past the consumer's own retries ends the loop: it restarts where the
    consumer is, so the configs on both sides of the crash are read once each."""
    crashes: list[BaseException] = []
    follower = ConfigFollower("", "t", ConfigTimeline(), signing=Signing(),
                              supervision=Supervision(on_crash=crashes.append,
                                                      first_backoff_s=0))
    consumer = FakeConsumer([{TP: [config_record(0, "a")]}, RuntimeError("injected"),
                             {TP: [config_record(1, "b")]}])
    follower.follow(consumer, [TP], {TP: 2})  # type: ignore[arg-type]
    await asyncio.wait_for(consumer.drained.wait(), 5)
    assert follower.crashes == 1 and [str(e) for e in crashes] == ["injected"]
    assert follower.applied == 2 and len(follower.timeline) == 2
    assert follower.healthy and follower.ready.is_set()
    await follower.stop()


def directive_record(offset: int, user: str) -> ConsumerRecord:
    directive = {"v": 1, "ts": TS, "scope": "broker", "broker": 1,
                 "entity": {"user": user, "client_id": "app"}, "quota": "producer_byte_rate",
                 "action": "throttle", "throttle_time_ms": 500, "until": TS + 500,
                 "observed": 2.0, "limit": 1.0, "window_ms": 10_000,
                 "config_level": f"/config/users/{user}"}
    value = orjson.dumps(directive)
    return ConsumerRecord("t", 0, offset, TS, 0, directive_key(directive), value, None, 0,
                          len(value), ())


async def test_a_directive_subscriber_that_crashes_restarts_and_reads_on(
        monkeypatch: Any) -> None:
    crashes: list[BaseException] = []
    sub = DirectiveSubscriber("", 1, topic="t", clock=lambda: TS, signing=Signing(),
                              expire_interval_ms=0,
                              supervision=Supervision(on_crash=crashes.append,
                                                      first_backoff_s=0))
    expire = sub._active.expire
    calls = 0

    def crashes_once(now: int, limit: int | None = None) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("injected")
        return expire(now, limit=limit)

    monkeypatch.setattr(sub._active, "expire", crashes_once)
    consumer = FakeConsumer([{TP: [directive_record(0, "alice")]},
                             {TP: [directive_record(1, "bob")]}])
    sub.follow(consumer, [TP])  # type: ignore[arg-type]
    await asyncio.wait_for(consumer.drained.wait(), 5)
    assert sub.stats["crashes"] == 1 and [str(e) for e in crashes] == ["injected"]
    assert len(sub) == 2 and sub.healthy
    await sub.stop()


async def test_the_gateway_counts_reader_restarts_and_is_not_healthy_meanwhile() -> None:
    config = GatewayConfig(upstream=(("b1", 9092),), listen=("127.0.0.1", 9192),
                           advertised_host="gw", kafka_bootstrap="", topics={},
                           kafka_security=PLAINTEXT, signing=Signing(),
                           directives_topic="")
    gateway = Gateway(config, directives=object())  # type: ignore[arg-type]
    supervision = gateway.reader_supervision("configs")
    assert supervision.give_up is None and supervision.on_crash is not None
    crashed = asyncio.Event()

    def on_crash(exc: BaseException) -> None:
        assert supervision.on_crash is not None
        supervision.on_crash(exc)
        crashed.set()

    follower = ConfigFollower("", "t", ConfigTimeline(), signing=Signing(),
                              supervision=Supervision(on_crash=on_crash, first_backoff_s=3600))
    gateway._follower = follower
    follower.follow(FakeConsumer([RuntimeError("injected")]), [TP], {TP: 0})  # type: ignore[arg-type]
    assert gateway.healthy
    await asyncio.wait_for(crashed.wait(), 5)
    assert not gateway.healthy
    assert b'quota_streams_gateway_reader_restarts_total{reader="configs"} 1.0' in \
        generate_latest(gateway.metrics.registry)
    await follower.stop()
