"""The router's cached routes equal the uncached route keys, for events and for columns, and
follow config changes; the worker and the audit route alike."""

from __future__ import annotations

from typing import Any

import pytest

from app.audit.synth import CONFIGS, T0, bench_records
from app.engine.batch import RequestColumns
from app.engine.configs import PRODUCE, REQUEST, ConfigUpdate
from app.engine.engine import ALL_QUOTAS, EngineSettings, QuotaEngine
from app.engine.events import BadEvent, Event, RequestEvent, parse_event, parse_record
from app.audit.recompute import route_texts
from app.intake.routes import RouteCache, RouteKey, Router, partition_for, route_keys, text_partition

PARTITIONS = 8


def configure(engine: QuotaEngine, record: dict[str, Any]) -> None:
    update = parse_event({"type": "quota_config", "v": 1, "ts": T0, **record})
    assert isinstance(update, ConfigUpdate)
    engine.process(update)


def expected(engine: QuotaEngine, event: Event) -> list[tuple[int, int]]:
    return [(partition_for(k, PARTITIONS), only) for k, only in route_keys(engine, event, event.ts)]


def events() -> list[Event]:
    out: list[Event] = []
    for record in bench_records(3000, entities=300, brokers=3):
        out.extend(e for e in parse_record(record) if not isinstance(e, (BadEvent, ConfigUpdate)))
    return out


def columns(sample: list[Event]) -> tuple[RequestColumns, list[RequestEvent]]:
    batch = RequestColumns()
    requests = [e for e in sample if isinstance(e, RequestEvent)]
    for e in requests:
        batch.append(e.ts, e.broker, e.gateway, e.listener, e.user, e.client_id, e.ip, e.api,
                     e.bytes, 0, 0, e.exempt, e.count, e.ts, 0)
    return batch, requests


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_routes_equal_route_keys(scope: str) -> None:
    engine = QuotaEngine(EngineSettings(scope=scope))
    for record in CONFIGS:
        configure(engine, record)
    router = Router(engine, PARTITIONS)
    sample = events()
    for event in sample:
        assert router.routes(event, event.ts) == expected(engine, event)
    batch, requests = columns(sample)
    outboxes: dict[int, RequestColumns] = {}
    router.split(batch, outboxes)
    want: dict[int, list[tuple[int, int]]] = {}
    for n, e in enumerate(requests):
        for partition, only in expected(engine, e):
            want.setdefault(partition, []).append((n, 0 if only == ALL_QUOTAS else only))
    got = {p: list(zip(out.ts, out.only)) for p, out in outboxes.items()}
    assert got == {p: [(requests[n].ts, only) for n, only in rows] for p, rows in want.items()}
    assert sum(len(b) for b in outboxes.values()) >= len(requests)


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_the_worker_and_the_audit_route_alike(scope: str) -> None:
    """The audit's step 1 places the same routes as key texts: hashed, they are the worker's
    partitions, for events and for request rows taken one at a time or as columns."""
    engine = QuotaEngine(EngineSettings(scope=scope))
    for record in CONFIGS:
        configure(engine, record)
    router, audit = Router(engine, PARTITIONS), RouteCache(engine, route_texts)

    def partitions(found: Any) -> list[int]:
        texts = found[0] if isinstance(found[0], tuple) else (found[0],)
        return [text_partition(t, PARTITIONS) for t in texts]

    sample = events()
    for event in sample:
        assert [p for p, _ in router.routes(event, event.ts)] == partitions(
            audit.routes(event, event.ts))
    batch, _ = columns(sample)
    rows = router.request_routes(batch)
    assert [[p for p, _ in r] for r in rows] == [
        partitions(audit.request_route(batch, i)) for i in range(len(batch))]


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


def test_route_key_text_is_the_partitioned_string() -> None:
    assert RouteKey(12, "u", "alice").text == "b12:u:alice"
    assert RouteKey(-1, "c", "app").text == "c:app"
    assert RouteKey(3, "connections", "").text == "b3:connections"
    assert RouteKey(3, "u", "bob").entity == RouteKey(-1, "u", "bob")
