"""The ingest's cached routes equal the engine's own `route_keys`, and follow config changes."""

from __future__ import annotations

from typing import Any

import pytest

from app.audit.synth import CONFIGS, T0, bench_records
from app.engine.configs import PRODUCE, REQUEST, ConfigUpdate
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import BadEvent, Event, parse_event, parse_record
from app.pipeline.routing import Router
from app.pipeline.routing import partition_for

PARTITIONS = 8


def configure(engine: QuotaEngine, record: dict[str, Any]) -> None:
    update = parse_event({"type": "quota_config", "v": 1, "ts": T0, **record})
    assert isinstance(update, ConfigUpdate)
    engine.process(update)


def expected(engine: QuotaEngine, event: Event) -> list[tuple[int, tuple[str, ...] | None]]:
    return [(partition_for(k, PARTITIONS), only) for k, only in engine.route_keys(event, event.ts)]


def events() -> list[Event]:
    out: list[Event] = []
    for record in bench_records(3000, entities=300, brokers=3):
        out.extend(e for e in parse_record(record) if not isinstance(e, (BadEvent, ConfigUpdate)))
    return out


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_routes_equal_route_keys(scope: str) -> None:
    engine = QuotaEngine(EngineSettings(scope=scope))
    for record in CONFIGS:
        configure(engine, record)
    router = Router(engine, PARTITIONS)
    for event in events():
        assert router.routes(event, event.ts) == expected(engine, event)


def test_a_config_change_reroutes() -> None:
    engine = QuotaEngine(EngineSettings())
    configure(engine, {"entity": {"client_id": "<default>"}, "quotas": {PRODUCE: 10**6, REQUEST: 50}})
    router = Router(engine, PARTITIONS)
    sample = events()
    before = [router.routes(e, e.ts) for e in sample]
    # a user-level quota takes precedence: produce windows move from client ids to users
    configure(engine, {"entity": {"user": "<default>"}, "quotas": {PRODUCE: 10**6}})
    after = [router.routes(e, e.ts) for e in sample]
    assert after == [expected(engine, e) for e in sample]
    assert after != before
