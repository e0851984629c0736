"""DirectiveSubscriber against a real broker: rebuild at start, survive a restart, follow live."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from app.kafka.topics import create_topics
from app.signing import Signing
from app.subscriber.consumer import DirectiveSubscriber, SubscriberError, wall_clock_ms

pytestmark = pytest.mark.integration

LOCAL = 1
PARTITIONS = 3
USERS = 300  # spread over partitions and several record batches


def _topic() -> str:
    return f"test.directives-{uuid.uuid4().hex[:8]}"


def _directive(user: str, until: int, ts: int, **over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "v": 1, "ts": ts, "scope": "cluster", "broker": None,
        "entity": {"user": user, "client_id": ""}, "quota": "producer_byte_rate",
        "action": "throttle", "throttle_time_ms": max(0, until - ts), "until": until,
        "observed": 600.0, "limit": 500.0, "window_ms": 10500,
        "config_level": f"/config/users/{user}",
    }
    d.update(over)
    return d


def _key(d: dict[str, Any]) -> bytes:
    return orjson.dumps(d.get("entity"), option=orjson.OPT_SORT_KEYS)


async def _produce(bootstrap: str, topic: str, values: list[Any], batch_size: int = 40,
                   timestamp_ms: int | None = None) -> None:
    """Produce in several record batches, so "the end" falls after a batch, not inside one;
    `timestamp_ms` stamps the records (what `offsets_for_times` searches)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for start in range(0, len(values), batch_size):
            futures = []
            for value in values[start : start + batch_size]:
                raw = value if isinstance(value, bytes) else orjson.dumps(value)
                key = _key(value) if isinstance(value, dict) else b"junk"
                futures.append(await producer.send(topic, raw, key=key,
                                                   timestamp_ms=timestamp_ms))
            await producer.flush()
            for future in futures:
                await future
    finally:
        await producer.stop()


class _ProbedSubscriber(DirectiveSubscriber):
    """Records the active-set size at the instant "ready" is set (what a broker thread sees)."""

    size_at_ready = -1

    def _set_ready(self) -> None:
        self.size_at_ready = len(self)
        super()._set_ready()


async def _started(bootstrap: str, topic: str, **kwargs: Any) -> _ProbedSubscriber:
    sub = _ProbedSubscriber(bootstrap, LOCAL, topic=topic, signing=Signing(), **kwargs)
    await sub.start()
    await sub.wait_ready(timeout=30)
    return sub


def _history(now: int) -> list[Any]:
    """USERS active throttles, plus expired, superseded, foreign-broker and bad records."""
    values: list[Any] = []
    for i in range(USERS):
        values.append(_directive(f"u{i}", until=now + 600_000 + i, ts=now))
    values.append(_directive("gone", until=now - 1, ts=now - 5000))  # already expired
    values.append(_directive("u0", until=now + 900_000, ts=now - 10))  # older ts: stale
    values.append(_directive("other", until=now + 600_000, ts=now, scope="broker", broker=2))
    values.append(_directive("mine", until=now + 600_000, ts=now, scope="broker", broker=LOCAL))
    values.append(_directive("lifted", until=now + 600_000, ts=now))
    values.append(_directive("lifted", until=now, ts=now + 1))  # newer, ends now: lift
    values.append(
        _directive("ops", until=now + 600_000, ts=now, quota="controller_mutation_rate",
                   action="reject", entity={"user": "ops", "client_id": "terraform"})
    )
    values.append(
        _directive("ip", until=now + 600_000, ts=now, quota="connection_creation_rate",
                   action="close_connection", entity={"ip": "203.0.113.9"})
    )
    values += [b"not json", _directive("v2", now + 600_000, now, v=2), {"v": 1, "ts": now}]
    values.append(_directive("last", until=now + 600_000, ts=now))  # tail of the last batch
    return values


def _assert_rebuilt(sub: _ProbedSubscriber, now: int) -> None:
    assert sub.size_at_ready == len(sub) == USERS + 4  # u*, mine, ops, ip, last
    for i in (0, 1, USERS // 2, USERS - 1):
        assert sub.request_throttle(f"u{i}", "app", now).throttle_ms == 600_000 + i
    assert sub.request_throttle("last", "x", now).throttle_ms == 600_000
    assert sub.request_throttle("mine", "x", now).throttle_ms == 600_000
    for user in ("gone", "other", "lifted", "v2"):
        assert sub.request_throttle(user, "x", now) == (0, False, ())
    assert sub.mutation("ops", "terraform", now) == (True, 600_000)
    assert sub.connection("203.0.113.9", "PLAINTEXT", now) == (True, 0, 600_000)
    stats = sub.stats
    assert stats["bad_reasons"] == {"not_json": 1, "wrong_version": 1, "missing_field": 1}
    assert stats["stale"] == 1 and stats["ignored"] == 1 and stats["lifted"] >= 1


async def test_rebuild_survives_restart_and_follows_live(kafka_bootstrap: str) -> None:
    topic = _topic()
    await create_topics(kafka_bootstrap, [(topic, PARTITIONS, {})])
    now = wall_clock_ms()
    await _produce(kafka_bootstrap, topic, _history(now))

    # small polls: "ready" only once every partition was read to a fetched high watermark
    first = await _started(kafka_bootstrap, topic, max_records=7)
    try:
        _assert_rebuilt(first, now)  # complete the moment it says ready
    finally:
        await first.stop()

    # "broker restart": a fresh subscriber instance rebuilds the same active set
    second = await _started(kafka_bootstrap, topic)
    try:
        _assert_rebuilt(second, now)
        live_now = wall_clock_ms()
        await _produce(
            kafka_bootstrap, topic,
            [_directive("newcomer", until=live_now + 30_000, ts=live_now),
             _directive("u0", until=live_now + 1_000, ts=live_now + 1)],  # newer: shortens
        )
        deadline = time.monotonic() + 15
        while second.request_throttle("newcomer", "x").throttle_ms == 0:
            assert time.monotonic() < deadline, "live directive not picked up"
            await asyncio.sleep(0.05)
        assert second.request_throttle("newcomer", "x", live_now).throttle_ms == 30_000
        assert second.request_throttle("u0", "x", live_now).throttle_ms == 1_000
        # the sync API is usable from a broker thread outside the event loop
        result: list[int] = []
        thread = threading.Thread(
            target=lambda: result.append(second.request_throttle("u1", "x", now).throttle_ms)
        )
        thread.start()
        thread.join()
        assert result == [600_001]
    finally:
        await second.stop()


async def test_empty_topic_is_ready_and_lookback_start(kafka_bootstrap: str) -> None:
    topic = _topic()
    await create_topics(kafka_bootstrap, [(topic, PARTITIONS, {})])
    empty = await _started(kafka_bootstrap, topic)
    await empty.stop()
    assert len(empty) == 0 and empty.is_ready

    # Records older than the lookback are skipped even though their directives would still be
    # active: read from the beginning, the old ones count too.
    now = wall_clock_ms()
    old = [_directive(f"old{i}", now + 60_000, now) for i in range(30)]
    await _produce(kafka_bootstrap, topic, old, timestamp_ms=now - 600_000)
    fresh = [_directive(f"u{i}", now + 60_000, now) for i in range(50)]
    await _produce(kafka_bootstrap, topic, fresh)
    bounded = await _started(kafka_bootstrap, topic, lookback_ms=120_000)
    whole = await _started(kafka_bootstrap, topic)
    try:
        assert len(bounded) == 50 and len(whole) == 80
    finally:
        await bounded.stop()
        await whole.stop()


async def test_missing_topic_fails_start_without_creating_it(kafka_bootstrap: str) -> None:
    sub = DirectiveSubscriber(kafka_bootstrap, LOCAL, topic=_topic(), start_timeout=1.5,
                              signing=Signing())
    with pytest.raises(SubscriberError):
        await sub.start()
    assert not sub.is_ready
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        assert sub.topic not in await admin.list_topics()
    finally:
        await admin.close()
