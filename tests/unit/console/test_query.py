"""The overview's query: exact pages whichever worker serves them (each worker's first rows
merged), sorted and filtered as asked, refused with a reason when the query cannot be used."""

from __future__ import annotations

import pytest

from app.console.index import ConsoleIndex
from app.console.query import MAX_DEPTH, Query, QueryError, merge, parse_query, select
from tests.unit.console.engine_windows import T0, USERS, state_of, windows

NOW = T0 + 5_000


def test_rows_are_the_windows_latest_checks_in_the_order_asked() -> None:
    engine, index, _ = windows()
    total, rows = select(index, Query(limit=200), state_of(engine), NOW, "w0")
    assert total == len(index) == 2 * len(USERS)  # producer bytes and request time each
    assert [r["utilization"] for r in rows] == sorted((r["utilization"] for r in rows),
                                                      reverse=True)
    for row in rows:
        state = engine.store[row["key"]]
        assert row["observed"] == engine.store[row["key"]].peek(state.clock, 11, 1000)
        assert row["utilization"] == row["observed"] / row["limit"]
    bob = [r for r in rows if r["entity"]["user"] == "bob" and r["quota"] == "producer_byte_rate"]
    assert bob[0]["limit"] == 100_000 and bob[0]["level"] == "/config/users/bob"
    by_entity = select(index, Query(sort="entity", desc=False, limit=200), state_of(engine),
                       NOW, "w0")[1]
    assert [r["label"] for r in by_entity] == sorted(r["label"] for r in by_entity)


def test_filters_count_what_they_match() -> None:
    engine, index, published = windows()
    total, rows = select(index, Query(text="ONERROR", limit=10), state_of(engine), NOW, "w0")
    assert total == 2 and all("onerror" in r["label"] for r in rows)
    total, rows = select(index, Query(quota="request_percentage", limit=10), state_of(engine),
                         NOW, "w0")
    assert total == len(USERS) and {r["quota"] for r in rows} == {"request_percentage"}
    throttled_now = {(d["quota"], d["entity"]["user"]) for d in published if d["until"] > NOW}
    assert throttled_now, "the scenario throttles someone until after NOW"
    total, rows = select(index, Query(throttled=True, limit=50), state_of(engine), NOW, "w0")
    assert {(r["quota"], r["entity"]["user"]) for r in rows} == throttled_now
    assert all(r["throttled_until"] > NOW and r["in_force"]["kind"] == "directive" for r in rows)


@pytest.mark.parametrize("sort,desc", [("utilization", True), ("observed", False),
                                       ("entity", False), ("limit", True), ("checked", True)])
@pytest.mark.parametrize("offset,limit", [(0, 3), (2, 5), (7, 50), (12, 1)])
def test_pages_merged_from_workers_equal_one_workers_pages(sort: str, desc: bool, offset: int,
                                                           limit: int) -> None:
    engine, index, _ = windows()
    query = Query(sort=sort, desc=desc, offset=offset, limit=limit)
    whole = select(index, Query(sort=sort, desc=desc, limit=200), state_of(engine), NOW, "w")
    halves = []
    for mine in ({0, 1}, {2, 3}):
        part = ConsoleIndex(0)
        part.partitions = {p: c for p, c in index.partitions.items() if p in mine}
        halves.append(select(part, query, state_of(engine), NOW, "w"))
    total, rows = merge(halves, query)
    assert total == whole[0]
    assert [r["key"] for r in rows] == [r["key"] for r in whole[1][offset:offset + limit]]


@pytest.mark.parametrize("params,reason", [
    ({"sort": "name"}, "sort must be one of"),
    ({"limit": "0"}, "limit 1-200"),
    ({"limit": "x"}, "must be integers"),
    ({"offset": str(MAX_DEPTH), "limit": "10"}, "narrow the filter"),
    ({"q": "x" * 1001}, "longer than 1000"),
])
def test_queries_it_cannot_use_are_refused_with_the_reason(params: dict[str, str],
                                                           reason: str) -> None:
    with pytest.raises(QueryError, match=reason):
        parse_query(params)


def test_a_query_travels_to_the_other_workers_unchanged() -> None:
    query = Query(sort="observed", desc=False, text="a b&c", quota="request_percentage",
                  throttled=True, offset=4, limit=9)
    assert parse_query(query.params()) == query


def test_a_token_bucket_shows_its_burst_spent_and_int_max_is_no_limit() -> None:
    from app.engine.configs import parse_config_record
    from app.engine.engine import EngineSettings, QuotaEngine
    from app.engine.events import parse_event

    engine = QuotaEngine(EngineSettings(scope="broker"))
    for record in ({"entity": {"user": "ops"}, "quotas": {"controller_mutation_rate": 2}},):
        engine.add_config(parse_config_record({"type": "quota_config", "v": 1, "ts": 0, **record}))
    index = ConsoleIndex(0)
    for i, partitions in enumerate([10, 10, 8]):
        event = parse_event({"v": 1, "type": "mutation", "ts": T0 + i, "broker": 1, "user": "ops",
                             "client_id": "tf", "api": "CreateTopics", "api_version": 7,
                             "partitions": partitions})
        for d in engine.process(event)[0]:
            index.checks(0)[d.key] = d
    connection = parse_event({"v": 1, "type": "connection", "ts": T0, "broker": 1,
                              "listener": "PLAINTEXT", "ip": "10.0.0.1"})
    for d in engine.process(connection)[0]:
        index.checks(0)[d.key] = d
    rows = {r["quota"]: r for r in select(index, Query(limit=10), lambda p, k: engine.store.get(k),
                                          T0 + 10, "w")[1]}
    bucket = rows["controller_mutation_rate"]
    burst = 2 * 11.0  # Q x N x W (11 x 1 s)
    assert bucket["observed"] is None
    assert bucket["tokens"] == pytest.approx(burst - 28, abs=0.01)  # refilled 2 ms' worth
    assert bucket["utilization"] == 1 - bucket["tokens"] / burst > 1  # in debt: throttled
    assert rows["max_connection_creation_rate"]["limit"] is None
    assert rows["max_connection_creation_rate"]["utilization"] is None
