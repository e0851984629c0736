"""Focused behaviour of `QuotaEngine`: what it records, what it decides, what it publishes.

Every test feeds contract dicts through `parse_event` (events and `quota_config` records), so
the path under test is the one every driver uses.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.engine.configs import (
    BROKER_RATE,
    FETCH,
    IP_RATE,
    MUTATION,
    PRODUCE,
    REQUEST,
    ConfigUpdate,
)
from app.engine.engine import ALL_QUOTAS, Decision, EngineSettings, QuotaEngine
from app.engine.timeline import FOREVER
from app.intake.routes import RouteKey, route_keys
from app.engine.events import BadEvent, ConnectionEvent, MutationEvent, RequestEvent, parse_event
from app.engine.kafka_math import UNLIMITED
from app.engine.stats import Rate, TokenBucket

T0 = 1_763_800_000_000


class Engine:
    """A QuotaEngine fed with contract dicts; remembers every directive it published."""

    def __init__(self, **settings: Any) -> None:
        self.engine = QuotaEngine(EngineSettings(**settings))
        self.directives: list[dict[str, Any]] = []
        self.last_directives: list[dict[str, Any]] = []

    def config(self, entity: dict[str, Any], quotas: dict[str, Any]) -> None:
        update = parse_event(
            {"type": "quota_config", "v": 1, "ts": T0, "entity": entity, "quotas": quotas}
        )
        assert isinstance(update, ConfigUpdate), getattr(update, "reason", update)
        assert self.engine.process(update) == ([], [])

    def send(self, t: int, **fields: Any) -> list[Decision]:
        event = parse_event({"v": 1, "ts": T0 + t, "broker": 1, **fields})
        assert not isinstance(event, BadEvent), event.reason
        decisions, self.last_directives = self.engine.process(event)
        self.directives.extend(self.last_directives)
        return decisions

    def request(
        self, t: int, api: str = "Metadata", user: str = "alice", client: str = "app", **fields: Any
    ) -> list[Decision]:
        return self.send(t, type="request", api=api, user=user, client_id=client, **fields)

    def mutation(
        self,
        t: int,
        partitions: int,
        version: int,
        api: str = "CreateTopics",
        user: str = "ops",
        client: str = "tf",
    ) -> list[Decision]:
        return self.send(
            t,
            type="mutation",
            api=api,
            api_version=version,
            partitions=partitions,
            user=user,
            client_id=client,
        )

    def connect(
        self,
        t: int,
        ip: str = "10.0.0.1",
        listener: str = "EXTERNAL",
        inter_broker: bool = False,
        broker: int = 1,
    ) -> list[Decision]:
        return self.send(
            t, type="connection", listener=listener, ip=ip, inter_broker=inter_broker, broker=broker
        )

    def rate(self, key: str, t: int) -> float:
        state = self.engine.store[key]
        assert isinstance(state, Rate)
        s = self.engine.settings
        return state.measure(T0 + t, s.window_num, s.window_ms)[0]


def by_quota(decisions: list[Decision], quota: str) -> Decision:
    found = [d for d in decisions if d.quota == quota]
    assert len(found) == 1, [d.as_dict() for d in decisions]
    return found[0]


def quotas_of(decisions: list[Decision]) -> list[str]:
    return [d.quota for d in decisions]


# -- fetch, produce, exempt ---------------------------------------------------------------------


def test_fetch_bytes_unrecorded_when_request_quota_throttles() -> None:
    e = Engine()
    e.config({"user": "alice"}, {REQUEST: 1, FETCH: 10**9})
    # 200 ms of thread time = 20 % against 1 %: the request quota throttles, bandwidth does not
    ds = e.request(0, api="Fetch", bytes=5000, thread_time_ms=200)
    assert quotas_of(ds) == [REQUEST, FETCH]  # Kafka's order: request time first, then bytes
    rq, bw = ds
    assert rq.throttle_time_ms > 0 and bw.throttle_time_ms == 0
    assert bw.observed == 5000 / 10  # the check saw the bytes...
    assert e.rate(bw.key, 0) == 0  # ...then the empty response took them back out
    nxt = by_quota(e.request(10, api="Fetch", bytes=100), FETCH)
    assert nxt.observed == pytest.approx(100 / 10.01)


def test_fetch_bytes_unrecorded_when_bandwidth_throttles_and_kept_otherwise() -> None:
    e = Engine()
    e.config({"user": "alice"}, {FETCH: 1000})
    ok = by_quota(e.request(0, api="Fetch", bytes=4000), FETCH)
    assert ok.throttle_time_ms == 0 and e.rate(ok.key, 0) == 400  # kept: a real response
    over = by_quota(e.request(0, api="Fetch", bytes=20000), FETCH)
    assert over.throttle_time_ms == 14000  # (2400 - 1000) / 1000 * 10000
    assert e.rate(over.key, 0) == 400  # the throttled (empty) fetch is unrecorded


def test_produce_bytes_stay_recorded_when_throttled() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000})
    d = by_quota(e.request(0, api="Produce", bytes=20000), PRODUCE)
    assert d.throttle_time_ms == 10000
    assert e.rate(d.key, 0) == 2000  # Kafka keeps the debt


def test_exempt_requests_are_not_recorded_for_request_percentage() -> None:
    e = Engine()
    e.config({"user": "alice"}, {REQUEST: 1})
    ds = e.request(0, api="LeaderAndIsr", thread_time_ms=500, exempt=True, count=3)
    assert ds == []
    assert not any(k.startswith("R") for k in e.engine.store)
    assert e.engine.exempt_requests == 3
    # a follower fetch is exempt too: neither request time nor consumer bytes
    e.config({"user": "alice"}, {FETCH: 1})
    assert e.request(0, api="Fetch", bytes=10**6, thread_time_ms=500, exempt=True) == []
    assert e.engine.exempt_requests == 4
    # the next non-exempt request starts from an empty request-time window
    d = by_quota(e.request(0, thread_time_ms=1), REQUEST)
    assert d.observed == pytest.approx(0.1 / 10)


def test_produce_acks0_is_exempt_from_request_time_but_counts_bytes() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000, REQUEST: 1})
    ds = e.request(0, api="Produce", bytes=20000, thread_time_ms=500, exempt=True)
    assert quotas_of(ds) == [PRODUCE]
    assert ds[0].throttle_time_ms == 10000 and ds[0].action == "throttle"
    assert len(e.last_directives) == 1  # bandwidth can still throttle the channel


def test_network_time_counts_only_for_the_next_request() -> None:
    e = Engine()
    e.config({"user": "alice"}, {REQUEST: 1})
    first = by_quota(e.request(0, thread_time_ms=5, network_time_ms=200), REQUEST)
    assert first.observed == pytest.approx(0.5 / 10) and first.throttle_time_ms == 0
    second = by_quota(e.request(0, thread_time_ms=0), REQUEST)
    assert (
        second.observed == pytest.approx(20.5 / 10) and second.throttle_time_ms == 1000
    )  # capped at W


def test_byte_rate_throttle_is_uncapped_request_throttle_capped_at_one_window() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1, REQUEST: 1})
    p, r = e.request(0, api="Produce", bytes=1000, thread_time_ms=1000)
    assert p.throttle_time_ms == round((100 - 1) / 1 * 10000)
    assert r.throttle_time_ms == 1000


# -- configs ------------------------------------------------------------------------------------


def test_no_quota_configured_means_no_decisions_and_no_state() -> None:
    e = Engine()
    assert e.request(0, api="Produce", bytes=10**9, thread_time_ms=900) == []
    assert e.request(0, api="Fetch", bytes=10**9, thread_time_ms=900) == []
    assert e.mutation(0, 10**6, version=7) == []
    assert e.engine.store == {}
    # a quota of one type turns on only that manager
    e.config({"user": "<default>"}, {PRODUCE: 100})
    ds = e.request(0, api="Produce", bytes=10, thread_time_ms=900)
    assert quotas_of(ds) == [PRODUCE]
    assert e.request(0, api="Fetch", bytes=10**9, thread_time_ms=900) == []


def test_config_change_in_place_keeps_samples() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000})
    first = by_quota(e.request(0, api="Produce", bytes=5000), PRODUCE)
    e.config({"user": "alice"}, {PRODUCE: 400})
    second = by_quota(e.request(0, api="Produce", bytes=0), PRODUCE)
    assert second.key == first.key
    assert second.limit == 400 and second.observed == 500  # the 5000 bytes are still there
    assert second.throttle_time_ms == 2500


def test_a_produce_sample_of_no_request_records_its_time_alone() -> None:
    """The gateway charges a Produce's bytes as it forwards it and its time when the answer
    comes (`count` 0): the second sample is not a request of 0 bytes in the byte-rate window
    (Kafka's own tests record such requests: a count of 1 still does)."""
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000, REQUEST: 50})
    key = by_quota(e.request(0, api="Produce", bytes=5000), PRODUCE).key
    before = e.engine.store[key].samples()  # type: ignore[union-attr]
    decisions = e.request(5, api="Produce", bytes=0, thread_time_ms=30.0, count=0)
    assert [d.quota for d in decisions] == [REQUEST]
    assert e.engine.store[key].samples() == before  # type: ignore[union-attr]


def test_a_new_store_is_used_at_once_and_the_old_one_left_alone() -> None:
    """The engine remembers windows' states only while the store is the same object: a driver
    that moves it to another store (a partition's cache, a restored copy) is never undercut."""
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000})
    first = by_quota(e.request(0, api="Produce", bytes=5000), PRODUCE)
    old = e.engine.store
    kept = old[first.key].samples()  # type: ignore[union-attr]
    e.engine.store = {}
    second = by_quota(e.request(10, api="Produce", bytes=300), PRODUCE)
    assert second.key == first.key and second.observed == 30  # a fresh window: 300 B / 10 s
    assert old[first.key].samples() == kept  # type: ignore[union-attr]
    e.engine.store = old
    third = by_quota(e.request(20, api="Produce", bytes=100), PRODUCE)
    assert third.observed == 5100 / 10.02  # back on the first window: 5100 B over 10.02 s


def test_removing_a_quota_leaves_the_window_unlimited() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 100})
    e.config({"user": "bob"}, {PRODUCE: 100})  # keeps the user level enabled
    assert by_quota(e.request(0, api="Produce", bytes=5000), PRODUCE).throttle_time_ms > 0
    e.config({"user": "alice"}, {PRODUCE: None})
    d = by_quota(e.request(0, api="Produce", bytes=5000), PRODUCE)
    assert d.limit == UNLIMITED and d.throttle_time_ms == 0 and d.action == "none"
    assert d.config_level is None
    assert d.observed == 1000  # still recorded (quotas are enabled), just not limited
    # removing the last quota of the type turns the manager off entirely
    e.config({"user": "bob"}, {PRODUCE: None})
    assert e.request(0, api="Produce", bytes=5000) == []


def test_changed_resolution_level_starts_a_fresh_window() -> None:
    """ClientQuotaManagerTest#testQuotaConfigPrecedence: "Metrics tags changed, restart counter"."""
    e = Engine()
    e.config({"user": "userA"}, {PRODUCE: 4000})
    shared = by_quota(
        e.request(0, api="Produce", client="client1", user="userA", bytes=30000), PRODUCE
    )
    other = by_quota(
        e.request(0, api="Produce", client="client2", user="userA", bytes=30000), PRODUCE
    )
    assert shared.entity == other.entity == {"user": "userA", "client_id": ""}
    assert other.observed == 6000  # shared by every client id of the user
    e.config({"user": "userA", "client_id": "client1"}, {PRODUCE: 5000})
    fresh = by_quota(e.request(0, api="Produce", client="client1", user="userA", bytes=0), PRODUCE)
    assert fresh.entity == {"user": "userA", "client_id": "client1"}
    assert fresh.key != shared.key
    assert fresh.observed == 0 and fresh.limit == 5000 and fresh.throttle_time_ms == 0
    assert fresh.config_level == "/config/users/userA/clients/client1"


def test_client_id_quota_is_shared_by_all_users() -> None:
    e = Engine()
    e.config({"client_id": "app"}, {PRODUCE: 1000})
    a = by_quota(e.request(0, api="Produce", user="alice", bytes=6000), PRODUCE)
    b = by_quota(e.request(0, api="Produce", user="bob", bytes=6000), PRODUCE)
    assert a.key == b.key and b.entity == {"user": "", "client_id": "app"}
    assert a.throttle_time_ms == 0 and b.throttle_time_ms == 2000


# -- directives ---------------------------------------------------------------------------------


def test_directive_rule_start_and_meaningful_extension_only() -> None:
    e = Engine()  # W = 1000 ms, so min_extension_ms = 100
    e.config({"user": "alice"}, {PRODUCE: 1000})
    first = by_quota(e.request(0, api="Produce", bytes=11000), PRODUCE)
    assert first.throttle_time_ms == 1000
    [d] = e.last_directives  # nothing active: publish
    assert d["until"] == T0 + 1000 and d["ts"] == T0 and d["throttle_time_ms"] == 1000
    assert d["action"] == "throttle" and d["quota"] == PRODUCE and d["scope"] == "broker"
    assert d["broker"] == 1 and d["entity"] == {"user": "alice", "client_id": ""}
    assert d["observed"] == first.observed and d["limit"] == 1000 and d["window_ms"] == 10000
    assert d["config_level"] == "/config/users/alice" and d["v"] == 1

    # a throttle ending a little later than the active one (+10 ms <= 100 ms): nothing
    small = by_quota(e.request(50, api="Produce", bytes=100), PRODUCE)
    assert 0 < T0 + 50 + small.throttle_time_ms - (T0 + 1000) <= 100
    assert e.last_directives == []

    # one ending sooner than the active one: nothing (the broker already holds it longer).
    # The big sample is purged at 11 s, so the throttle computed then is short.
    e2 = Engine()
    e2.config({"user": "alice"}, {PRODUCE: 1000})
    e2.request(0, api="Produce", bytes=200000)
    assert [x["until"] for x in e2.last_directives] == [T0 + 190000]
    later = by_quota(e2.request(11000, api="Produce", bytes=12000), PRODUCE)
    assert later.throttle_time_ms == 2000 and T0 + 11000 + 2000 < T0 + 190000
    assert e2.last_directives == []

    # a meaningful extension (> 100 ms): publish the new until
    big = by_quota(e.request(100, api="Produce", bytes=5000), PRODUCE)
    until = T0 + 100 + big.throttle_time_ms
    assert until > T0 + 1000 + 100
    assert [x["until"] for x in e.last_directives] == [until]

    # once the active directive has ended, the next throttle publishes again
    after = by_quota(e.request(until - T0, api="Produce", bytes=0), PRODUCE)
    assert after.throttle_time_ms > 0
    assert [x["until"] for x in e.last_directives] == [until + after.throttle_time_ms]


def test_min_extension_setting_is_honoured() -> None:
    e = Engine(min_extension_ms=0)
    e.config({"user": "alice"}, {PRODUCE: 1000})
    e.request(0, api="Produce", bytes=11000)
    d = by_quota(e.request(50, api="Produce", bytes=100), PRODUCE)
    assert T0 + 50 + d.throttle_time_ms > T0 + 1000
    assert len(e.last_directives) == 1  # any extension publishes


def test_no_directive_without_throttle() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000, REQUEST: 50})
    ds = e.request(0, api="Produce", bytes=100, thread_time_ms=1)
    assert all(d.throttle_time_ms == 0 and d.action == "none" for d in ds)
    assert e.last_directives == []


# -- controller mutations -----------------------------------------------------------------------


def test_strict_mutation_rejects_without_recording() -> None:
    e = Engine(controller_window_num=10)
    e.config({"user": "ops"}, {MUTATION: 10})  # burst 100
    assert by_quota(e.mutation(0, 130, version=7), MUTATION).action == "none"  # admitted, -30
    d = by_quota(e.mutation(0, 5, version=7), MUTATION)
    assert d.action == "reject" and d.throttle_time_ms == 3000
    assert d.observed == -30  # nothing recorded for the rejected request
    bucket = e.engine.store[d.key]
    assert isinstance(bucket, TokenBucket) and bucket.tokens == -30
    [directive] = e.last_directives
    assert directive["action"] == "reject" and directive["until"] == T0 + 3000
    # once refilled to >= 0 the next strict request is admitted
    assert by_quota(e.mutation(3000, 5, version=7), MUTATION).action == "none"


def test_permissive_mutation_records_then_throttles() -> None:
    e = Engine(controller_window_num=10)
    e.config({"user": "ops"}, {MUTATION: 10})
    e.mutation(0, 130, version=5)  # CreateTopics v5 is permissive
    d = by_quota(e.mutation(0, 20, version=5), MUTATION)
    assert d.action == "throttle" and d.observed == -50 and d.throttle_time_ms == 5000
    assert e.last_directives[0]["action"] == "throttle"


@pytest.mark.parametrize(
    "api,strict_since", [("CreateTopics", 6), ("DeleteTopics", 5), ("CreatePartitions", 3)]
)
def test_strict_versions(api: str, strict_since: int) -> None:
    for version, action in ((strict_since - 1, "throttle"), (strict_since, "reject")):
        e = Engine()
        e.config({"user": "ops"}, {MUTATION: 1})
        e.mutation(0, 20, version=version, api=api)  # burst 11: now at -9
        assert by_quota(e.mutation(0, 1, version=version, api=api), MUTATION).action == action


# -- connections --------------------------------------------------------------------------------


def test_ip_throttled_connection_is_unrecorded_from_ip_listener_and_broker_rates() -> None:
    e = Engine(window_num=2)
    e.config({"ip": "10.0.0.1"}, {IP_RATE: 1})
    ok = e.connect(0)
    assert [d.throttle_time_ms for d in ok] == [0, 0, 0]
    ds = e.connect(0)
    ip = by_quota(ds, IP_RATE)
    assert ip.action == "close_connection" and ip.throttle_time_ms == 1000
    assert [x["action"] for x in e.last_directives] == ["close_connection"]
    keys = {d.key for d in ds}
    assert len(keys) == 3
    for key in keys:  # broker, listener and IP rates: only the accepted connection remains
        assert e.rate(key, 0) == 1.0


def test_ip_sample_is_taken_after_the_acceptor_delay() -> None:
    e = Engine(window_num=2)
    e.config({"broker": 1}, {BROKER_RATE: 1})
    e.config({"ip": "<default>"}, {IP_RATE: 100})
    e.connect(0)
    ds = e.connect(0)
    broker = next(d for d in ds if d.quota == BROKER_RATE and "listener" not in d.entity)
    assert broker.action == "delay_connection" and broker.throttle_time_ms == 1000
    ip = by_quota(ds, IP_RATE)
    assert ip.ts == T0 + 1000 and ip.action == "none"  # the acceptor blocked 1000 ms first
    assert ip.config_level == "/config/ips/<default>"


def test_inter_broker_listener_not_counted_in_broker_rate() -> None:
    e = Engine(window_num=2)
    e.config({"broker": "<default>"}, {BROKER_RATE: 1})
    for _ in range(5):
        ds = e.connect(0, listener="REPLICATION", inter_broker=True)
        assert len(ds) == 1 and ds[0].entity == {"broker": 1, "listener": "REPLICATION"}
        assert ds[0].throttle_time_ms == 0
    assert not any(k.startswith("CB") for k in e.engine.store)
    first = e.connect(0)  # the broker-wide rate has seen no inter-broker connection
    assert all(d.throttle_time_ms == 0 for d in first)
    assert by_quota([d for d in first if "listener" not in d.entity], BROKER_RATE).observed == 1.0


def test_listener_limit_and_broker_default() -> None:
    e = Engine(window_num=2)
    e.config({"broker": "<default>", "listener": "EXTERNAL"}, {BROKER_RATE: 2})
    e.config({"broker": 2, "listener": "EXTERNAL"}, {BROKER_RATE: 5})
    for _ in range(2):
        e.connect(0)
    d = next(d for d in e.connect(0) if "listener" in d.entity)
    assert d.limit == 2 and d.throttle_time_ms == 500
    assert d.config_level == "/config/brokers/<default>/listeners/EXTERNAL"
    d2 = next(d for d in e.connect(0, broker=2) if "listener" in d.entity)
    assert d2.limit == 5 and d2.config_level == "/config/brokers/2/listeners/EXTERNAL"


def test_ip_quota_disabled_means_not_recorded() -> None:
    e = Engine()
    ds = e.connect(0)
    assert quotas_of(ds) == [BROKER_RATE, BROKER_RATE]  # broker and listener, no IP window
    assert not any(k.startswith("CI") for k in e.engine.store)


# -- scope, time, routing -----------------------------------------------------------------------


def test_cluster_scope_sums_brokers_and_broker_scope_does_not() -> None:
    results = {}
    for scope in ("broker", "cluster"):
        e = Engine(scope=scope)
        e.config({"user": "alice"}, {PRODUCE: 1000})
        e.send(0, broker=1, type="request", api="Produce", user="alice", client_id="a", bytes=8000)
        d = by_quota(
            e.send(
                0, broker=2, type="request", api="Produce", user="alice", client_id="a", bytes=8000
            ),
            PRODUCE,
        )
        results[scope] = d
    assert results["broker"].observed == 800 and results["broker"].throttle_time_ms == 0
    assert results["broker"].broker == 2
    assert results["cluster"].observed == 1600 and results["cluster"].throttle_time_ms == 6000
    assert results["cluster"].broker is None


def test_out_of_order_event_is_clamped_to_the_state_clock() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000})
    by_quota(e.request(5000, api="Produce", bytes=100), PRODUCE)
    late = by_quota(e.request(1000, api="Produce", bytes=100), PRODUCE)
    assert late.ts == T0 + 5000  # processed at the latest time this window has seen
    state = e.engine.store[late.key]
    assert state.clock == T0 + 5000


def test_drain_touched_reports_changed_state_keys() -> None:
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1000, REQUEST: 10})
    ds = e.request(0, api="Produce", bytes=1, thread_time_ms=1)
    assert e.engine.drain_touched() == {d.key for d in ds}
    assert e.engine.drain_touched() == set()
    again = e.request(10, api="Produce", bytes=1, thread_time_ms=1)  # windows the engine keeps
    assert e.engine.drain_touched() == {d.key for d in again} == {d.key for d in ds}


def _touched_by_route(engine: QuotaEngine, event: Any) -> dict[str, set[str]]:
    """Process `event` the way the live pipeline does: per route key, the quotas it owns."""
    out: dict[str, set[str]] = {}
    engine.drain_touched()
    for key, only in route_keys(engine, event, FOREVER):
        if only == ALL_QUOTAS:
            engine.process(event)
        else:
            assert isinstance(event, RequestEvent)
            engine.process(event, FOREVER, only)
        out.setdefault(key.text, set()).update(engine.drain_touched())
    return out


@pytest.mark.parametrize("scope", ["broker", "cluster"])
def test_route_keys_co_locate_windows(scope: str) -> None:
    """Every window is only ever touched under one route key, whatever the event and level."""
    engine = QuotaEngine(EngineSettings(scope=scope))
    for record in (
        {"entity": {"user": "alice"}, "quotas": {PRODUCE: 10**6, REQUEST: 50}},
        {"entity": {"client_id": "shared-app"}, "quotas": {PRODUCE: 10**6, FETCH: 10**6}},
        {
            "entity": {"user": "bob", "client_id": "<default>"},
            "quotas": {FETCH: 10**6, MUTATION: 5},
        },
        {"entity": {"user": "<default>"}, "quotas": {REQUEST: 20, MUTATION: 10}},
        {"entity": {"ip": "<default>"}, "quotas": {IP_RATE: 100}},
    ):
        update = parse_event({"type": "quota_config", "v": 1, **record})
        assert isinstance(update, ConfigUpdate)
        engine.process(update)
    owner: dict[str, str] = {}
    splits = 0
    users = ["alice", "bob", "carol"]
    clients = ["shared-app", "app-1", "app-2"]
    t = T0
    for i in range(300):
        t += 7
        user, client = users[i % 3], clients[(i // 3) % 3]
        broker = 1 + i % 2
        kind = i % 5
        if kind < 3:
            event: Any = RequestEvent(
                t,
                broker,
                "PLAINTEXT",
                user,
                client,
                "10.0.0.1",
                ("Produce", "Fetch", "Metadata")[kind],
                100,
                0.5,
                0.1,
                False,
                1,
            )
        elif kind == 3:
            event = MutationEvent(t, broker, user, client, "CreateTopics", 7, 1, False)
        else:
            event = ConnectionEvent(t, broker, "EXTERNAL", f"10.0.0.{i % 4}", False)
        routes = _touched_by_route(engine, event)
        for route, keys in routes.items():
            for key in keys:
                assert owner.setdefault(key, route) == route, (key, owner[key], route)
        if (
            isinstance(event, RequestEvent)
            and event.user == "carol"
            and event.client_id == "shared-app"
            and event.api == "Produce"
        ):
            # carol's request time (users/<default>) lives with carol, the shared client id's
            # bytes (clients/shared-app) with the client id: the event is split
            assert len(routes) == 2, routes
            splits += 1
    assert splits > 0
    # the same user's windows route together; a shared client id's windows route together
    def first_key(event: RequestEvent) -> RouteKey:
        return route_keys(engine, event, FOREVER)[0][0]

    assert first_key(
        RequestEvent(t, 1, "", "alice", "app-1", "", "Produce", 1, 0, 0, False, 1)
    ) == first_key(
        RequestEvent(t, 1, "", "alice", "app-2", "", "Metadata", 1, 0, 0, False, 1)
    )
    assert first_key(
        RequestEvent(t, 1, "", "bob", "shared-app", "", "Produce", 1, 0, 0, False, 1)
    ) == first_key(
        RequestEvent(t, 1, "", "carol", "shared-app", "", "Produce", 1, 0, 0, False, 1)
    )


@pytest.mark.parametrize(
    "record",
    [
        {
            "type": "request",
            "api": "Produce",
            "user": "alice",
            "client_id": "app",
            "bytes": 10**400,
        },
        {"type": "request", "api": "Produce", "user": "alice", "client_id": "app", "count": 10**20},
        {
            "type": "mutation",
            "api": "CreateTopics",
            "api_version": 7,
            "user": "alice",
            "client_id": "app",
            "partitions": 10**400,
        },
    ],
)
def test_out_of_range_amounts_are_bad_events_not_crashes(record: dict[str, Any]) -> None:
    """Before the bound, 10**400 bytes or partitions passed validation and the engine raised
    OverflowError in its float arithmetic (int too large to convert to float)."""
    event = parse_event({"v": 1, "ts": T0, "broker": 1, **record})
    assert isinstance(event, BadEvent) and "out of range" in event.reason
    ok = parse_event(
        {
            "v": 1,
            "ts": T0,
            "broker": 1,
            **record,
            **{k: 10**15 for k in ("bytes", "partitions", "count") if k in record},
        }
    )
    assert not isinstance(ok, BadEvent)
    e = Engine()
    e.config({"user": "alice"}, {PRODUCE: 1, MUTATION: 1})
    e.engine.process(ok)  # the largest accepted amount is processed without error


@pytest.mark.parametrize("over, reason", [
    ({"broker": 2**31}, "broker is out of range"),
    ({"gateway": 2**31}, "gateway is out of range"),
    ({"gateway": -1}, "gateway must be >= 0"),
    ({"gateway": "a"}, "gateway must be an integer"),
])
def test_ids_beyond_kafkas_32_bit_node_ids_are_bad_events(over: dict[str, Any], reason: str) -> None:
    """Allocation state holds broker and gateway ids as 32-bit integers, as Kafka's node ids."""
    base = {"type": "request", "v": 1, "ts": T0, "broker": 1, "user": "alice", "client_id": "app",
            "api": "Produce"}
    event = parse_event({**base, **over})
    assert isinstance(event, BadEvent) and event.reason == reason
    named = parse_event({**base, "broker": 2**31 - 1, "gateway": 2**31 - 1})
    assert isinstance(named, RequestEvent) and named.enforcer == 2**31 - 1
    unnamed = parse_event(base)
    assert isinstance(unnamed, RequestEvent) and unnamed.gateway == -1 and unnamed.enforcer == 1
