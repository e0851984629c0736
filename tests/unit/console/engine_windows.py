"""Real windows for the console's tests: an engine run over a few principals, its checks in a
`ConsoleIndex` as the worker's engine step leaves them (one dict per samples partition)."""

from __future__ import annotations

import zlib
from typing import Any

from app.console.index import ConsoleIndex
from app.engine.configs import ConfigUpdate, QuotaConfigs
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import RequestEvent, parse_event

T0 = 1_763_800_000_000
PARTITIONS = 4
USERS = ["alice", "bob", "carol", "dave", "erin", "<img src=x onerror=alert(1)>"]


def configs() -> QuotaConfigs:
    out = QuotaConfigs()
    for record in ({"entity": {"user": "<default>"}, "quotas": {"producer_byte_rate": 20_000,
                                                              "request_percentage": 5}},
                   {"entity": {"user": "bob"}, "quotas": {"producer_byte_rate": 100_000}}):
        update = parse_event({"v": 1, "type": "quota_config", "ts": 0, **record})
        assert isinstance(update, ConfigUpdate)
        out.apply(update)
    return out


def request(ts: int, user: str, nbytes: int, thread_ms: float) -> RequestEvent:
    event = parse_event({"v": 1, "type": "request", "ts": ts, "broker": 1, "user": user,
                         "client_id": "app", "api": "Produce", "bytes": nbytes,
                         "thread_time_ms": thread_ms})
    assert isinstance(event, RequestEvent)
    return event


def windows(users: list[str] = USERS, seconds: int = 5) -> tuple[QuotaEngine, ConsoleIndex,
                                                                    list[dict[str, Any]]]:
    """(engine, index, directives published) after `seconds` of traffic, user i sending i+1
    times the base rate; windows spread over PARTITIONS by their user."""
    engine = QuotaEngine(EngineSettings(scope="broker"), configs())
    index = ConsoleIndex(history_windows=4)
    published = []
    for step in range(seconds * 10):
        for i, user in enumerate(users):
            _, directives = engine.process(request(T0 + step * 100, user, 800 * (i + 1),
                                                   0.5 * (i + 1)))
            for directive in directives:
                index.published_record(directive)
                published.append(directive)
            partition = zlib.crc32(user.encode()) % PARTITIONS
            index.checks(partition).update(engine.drain_windows())
            engine.drain_touched()
    return engine, index, published


def state_of(engine: QuotaEngine) -> Any:
    return lambda partition, key: engine.store.get(key)
