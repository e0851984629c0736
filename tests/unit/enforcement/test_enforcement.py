"""The decisions the gateway and the simulator share (`app.enforcement`), each on its own with
made-up times: what a request, a mutation request and a new connection are answered."""

from __future__ import annotations

from typing import Any

import orjson

from app.enforcement.connections import AcceptQueue, ConnectionQuota
from app.enforcement.local import LocalQuotas
from app.enforcement.mutations import MutationQuota, is_strict
from app.enforcement.requests import RequestQuota, Throttle
from app.enforcement.sources import QuotaSources
from app.engine.configs import ConfigUpdate, parse_config_record
from app.engine.engine import EngineSettings
from app.subscriber.active_set import ActiveSet
from app.usage.recorder import UsageRecorder
from app.usage.records import RecordEncoder

T0 = 1_763_800_000_000
BROKER = 1


def local(*quotas: dict[str, Any]) -> LocalQuotas:
    """Local quota managers with windows of 11 x 100 ms (a mutation bucket of 1.1 s)."""
    quotas_ = LocalQuotas(EngineSettings(window_ms=100, controller_window_ms=100))
    for q in quotas:
        quotas_.engine.add_config(parse_config_record({"type": "quota_config", "v": 1, "ts": 0, **q}))
    return quotas_


def directive(active: ActiveSet, quota: str, action: str, entity: dict[str, Any], until: int,
              scope: str = "cluster") -> None:
    active.apply({"v": 1, "ts": T0, "scope": scope, "broker": BROKER if scope == "broker" else None,
                  "entity": entity, "quota": quota, "action": action,
                  "throttle_time_ms": until - T0, "until": until, "observed": 2.0, "limit": 1.0,
                  "window_ms": 1000, "config_level": None})


def events(usage: UsageRecorder, kind: str) -> list[dict[str, Any]]:
    return [e for record in RecordEncoder().records(usage.flush()) if record.kind == kind
            for e in orjson.loads(record.value)["events"]]


# -- requests ----------------------------------------------------------------------------------


def test_a_request_is_throttled_by_the_larger_of_the_directive_and_the_local_decision() -> None:
    active = ActiveSet(BROKER)
    quota = RequestQuota(QuotaSources(active, local(
        {"entity": {"user": "alice"}, "quotas": {"producer_byte_rate": 10_000}})))
    # 11 x 100 ms at 10 kB/s: ~11 kB fit; 20 kB puts the window in debt at once
    own = quota.throttle(BROKER, T0, "PLAINTEXT", "alice", "app", "10.0.0.1", "Produce", 20_000, 1.0)
    assert own.ms > 0 and not own.empty
    directive(active, "producer_byte_rate", "throttle", {"user": "alice", "client_id": ""},
              T0 + 60_000)
    assert quota.throttle(BROKER, T0 + 10, "PLAINTEXT", "alice", "app", "10.0.0.1", "Produce", 1,
                          1.0).ms == 60_000 - 10
    # a directive for another API's quota does not throttle this one
    assert quota.throttle(BROKER, T0 + 10, "PLAINTEXT", "alice", "app", "10.0.0.1", "Fetch", 1,
                          1.0, fetch=True) == (0, False)


def test_a_fetch_is_capped_from_the_principals_first_request() -> None:
    # the gateway reads configs as they come (each in force from its ts): the first Fetch, before
    # any request was charged, is capped already, at a fiftieth of Kafka's 10 s of quota
    quotas = LocalQuotas(EngineSettings(window_num=11, window_ms=1000))
    quotas.engine.add_config(ConfigUpdate("client", ("carol", None),
                                          {"consumer_byte_rate": 10_000.0}, T0))
    assert quotas.fetch_cap(BROKER, "carol", "etl") == 10_000 * 10 // 50
    assert quotas.fetch_cap(BROKER, "dave", "etl") is None


def test_a_fetch_the_directives_throttle_is_not_charged_locally() -> None:
    def two_fetches(fetch: bool) -> tuple[Throttle, Throttle]:
        active = ActiveSet(BROKER)
        quota = RequestQuota(QuotaSources(active, local(
            {"entity": {"user": "carol"}, "quotas": {"consumer_byte_rate": 10_000}})))
        directive(active, "consumer_byte_rate", "throttle", {"user": "carol", "client_id": ""},
                  T0 + 50)
        return (quota.throttle(BROKER, T0, "PLAINTEXT", "carol", "etl", "10.0.0.3", "Fetch",
                               1_000_000, 1.0, fetch),
                quota.throttle(BROKER, T0 + 100, "PLAINTEXT", "carol", "etl", "10.0.0.3", "Fetch",
                               100, 1.0, fetch))

    # the throttled fetch went out empty: its megabyte is not the consumer's
    assert two_fetches(fetch=True) == ((50, True), (0, False))
    # a response that keeps its data is charged: ~99 s of debt at 10 kB/s
    assert two_fetches(fetch=False)[0].ms > 90_000


# -- mutations ---------------------------------------------------------------------------------

MUTATION_QUOTA = {"entity": {"client_id": "ops"}, "quotas": {"controller_mutation_rate": 10}}


def test_strict_versions_are_those_of_kip_599() -> None:
    assert [is_strict("CreateTopics", v) for v in (5, 6)] == [False, True]
    assert [is_strict("DeleteTopics", v) for v in (4, 5)] == [False, True]
    assert [is_strict("CreatePartitions", v) for v in (2, 3)] == [False, True]


def test_a_strict_request_in_debt_is_rejected_topic_by_topic_in_request_order() -> None:
    usage = UsageRecorder(False, span_ms=60_000)
    quota = MutationQuota(QuotaSources(ActiveSet(BROKER), local(MUTATION_QUOTA)), usage)
    # 10/s x 11 x 100 ms = 11 tokens: 8 fit (3 left), the next 8 is admitted with tokens >= 0
    # and puts the bucket in debt (-5), the third is rejected and not charged
    plan = quota.plan(BROKER, T0, "", "ops", "CreateTopics", 7, [8, 8, 8])
    assert plan.rejected == {2} and plan.reject_ms > 0 and plan.throttle_ms == 0
    assert plan.response_ms() == plan.reject_ms
    quota.admitted(BROKER, T0, "", "ops", "CreateTopics", 7, [8, 8])
    assert [e["partitions"] for e in events(usage, "mutation")] == [8, 8]


def test_a_permissive_request_in_debt_is_admitted_and_throttled() -> None:
    quota = MutationQuota(QuotaSources(ActiveSet(BROKER), local(MUTATION_QUOTA)),
                          UsageRecorder(False))
    plan = quota.plan(BROKER, T0, "", "ops", "CreateTopics", 5, [8, 8, 8])
    assert plan.rejected == frozenset() and plan.throttle_ms > 0
    assert plan.response_ms() == plan.throttle_ms


def test_a_reject_directive_rejects_a_strict_request_whole_and_throttles_a_permissive_one() -> None:
    active = ActiveSet(BROKER)
    quota = MutationQuota(QuotaSources(active), UsageRecorder(False))
    directive(active, "controller_mutation_rate", "reject", {"user": "", "client_id": "ops"},
              T0 + 2000)
    strict = quota.plan(BROKER, T0 + 500, "", "ops", "DeleteTopics", 6, [3, 3])
    assert (strict.rejected, strict.reject_ms) == ({0, 1}, 1500)
    permissive = quota.plan(BROKER, T0 + 500, "", "ops", "DeleteTopics", 4, [3, 3])
    assert (permissive.rejected, permissive.throttle_ms) == (frozenset(), 1500)
    after = quota.plan(BROKER, T0 + 2000, "", "ops", "DeleteTopics", 6, [3, 3])
    assert after.response_ms() == 0


# -- connections -------------------------------------------------------------------------------


def acceptor(quotas: LocalQuotas | None = None, protected: bool = False,
             listener: str = "PLAINTEXT") -> tuple[ActiveSet, UsageRecorder, AcceptQueue[str]]:
    active, usage = ActiveSet(BROKER), UsageRecorder(False, span_ms=60_000)
    quota = ConnectionQuota(QuotaSources(active, quotas), usage)
    return active, usage, AcceptQueue(quota, BROKER, listener, protected, protected)


def test_a_delay_holds_the_acceptor_and_queues_later_connections_behind_it() -> None:
    active, usage, queue = acceptor()
    directive(active, "max_connection_creation_rate", "delay_connection",
              {"broker": BROKER, "listener": "PLAINTEXT"}, T0 + 300, "broker")
    assert queue.arrive("a", "10.0.0.1")
    step = queue.step(T0)
    assert step is not None and step.arrival is None and step.hold_ms == 300
    assert not queue.arrive("b", "10.0.0.2")  # held: it waits behind "a"
    first, second = queue.step(T0 + 300), queue.step(T0 + 300)
    assert first is not None and first.arrival is not None and second is not None
    assert (first.arrival.conn, first.arrival.delayed, first.close_ms) == ("a", True, 0)
    assert second.arrival is not None and (second.arrival.conn, second.arrival.delayed) == ("b", False)
    assert queue.step(T0 + 300) is None
    assert [(e["ip"], e["ts"]) for e in events(usage, "connection")] == [
        ("10.0.0.1", T0 + 300), ("10.0.0.2", T0 + 300)]


def test_a_protected_listener_ignores_the_broker_wide_delay() -> None:
    active, usage, queue = acceptor(protected=True, listener="REPLICATION")
    directive(active, "max_connection_creation_rate", "delay_connection", {"broker": "<default>"},
              T0 + 500, "broker")
    queue.arrive("replica", "10.9.9.9")
    step = queue.step(T0)
    assert step is not None and step.arrival is not None and step.close_ms == 0
    (event,) = events(usage, "connection")
    assert event["inter_broker"] is True


def test_an_ip_over_its_local_rate_is_closed_and_is_no_event() -> None:
    _, usage, queue = acceptor(local(
        {"entity": {"ip": "10.0.0.1"}, "quotas": {"connection_creation_rate": 1}}))
    for conn in ("a", "b"):
        queue.arrive(conn, "10.0.0.1")
    accepted, closed = queue.step(T0), queue.step(T0)
    assert accepted is not None and accepted.close_ms == 0
    assert closed is not None and closed.arrival is not None and closed.close_ms > 0
    assert [e["ip"] for e in events(usage, "connection")] == ["10.0.0.1"]


def test_a_local_delay_holds_once_and_a_connection_gone_meanwhile_is_passed_over() -> None:
    gone: set[str] = set()
    active, usage = ActiveSet(BROKER), UsageRecorder(False, span_ms=60_000)
    quota = ConnectionQuota(QuotaSources(active, local(
        {"entity": {"broker": BROKER}, "quotas": {"max_connection_creation_rate": 1}})), usage)
    queue: AcceptQueue[str] = AcceptQueue(quota, BROKER, "PLAINTEXT", gone=gone.__contains__)
    for conn in ("a", "b", "c"):
        queue.arrive(conn, "10.0.0.1")
    first = queue.step(T0)
    assert first is not None and first.arrival is not None  # within the rate
    hold = queue.step(T0)
    assert hold is not None and hold.arrival is None and hold.hold_ms > 0
    gone.add("c")
    after = queue.step(T0 + hold.hold_ms)  # "b" is not delayed a second time
    assert after is not None and after.arrival is not None and after.arrival.conn == "b"
    assert after.arrival.delayed and after.close_ms == 0
    assert queue.step(T0 + hold.hold_ms) is None  # "c" left: never decided, no event
    assert len(events(usage, "connection")) == 2
