"""ActiveSet: scope filtering, entity matching, max of several, expiry, replacement, bad input,
and a randomized check against a brute-force model of the documented rules."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract.directives import FETCH_QUOTAS, PRODUCE_QUOTAS, BadDirective
from app.subscriber.active_set import (
    ADDED,
    IGNORED,
    LIFTED,
    REPLACED,
    STALE,
    ActiveSet,
)

T0 = 1_763_800_000_000
LOCAL = 1


def directive(**over: Any) -> dict[str, Any]:
    """A valid cluster-scope producer throttle for alice (all client ids), overridable."""
    d: dict[str, Any] = {
        "v": 1,
        "ts": T0,
        "scope": "cluster",
        "broker": None,
        "entity": {"user": "alice", "client_id": ""},
        "quota": "producer_byte_rate",
        "action": "throttle",
        "throttle_time_ms": 2000,
        "until": T0 + 2000,
        "observed": 600.0,
        "limit": 500.0,
        "window_ms": 10500,
        "config_level": "/config/users/alice",
    }
    d.update(over)
    return d


def client(user: str, client_id: str, **over: Any) -> dict[str, Any]:
    return directive(entity={"user": user, "client_id": client_id}, **over)


@pytest.fixture
def active() -> ActiveSet:
    return ActiveSet(broker_id=LOCAL)


# --------------------------------------------------------------------------- scope


def test_broker_scope_applies_only_on_named_broker(active: ActiveSet) -> None:
    assert active.apply(directive(scope="broker", broker=2)) == IGNORED
    assert active.request_throttle("alice", "app", T0).throttle_ms == 0
    assert len(active) == 0
    assert active.apply(directive(scope="broker", broker=LOCAL)) == ADDED
    assert active.request_throttle("alice", "app", T0).throttle_ms == 2000


def test_cluster_scope_applies_everywhere_whatever_broker_field(active: ActiveSet) -> None:
    active.apply(directive(scope="cluster", broker=7))
    assert ActiveSet(broker_id=9).apply(directive(scope="cluster")) == ADDED
    assert active.request_throttle("alice", "x", T0).throttle_ms == 2000


def test_broker_and_cluster_directives_coexist_and_max_wins(active: ActiveSet) -> None:
    active.apply(directive(scope="cluster", until=T0 + 1000))
    active.apply(directive(scope="broker", broker=LOCAL, until=T0 + 3000))
    result = active.request_throttle("alice", "x", T0)
    assert result.throttle_ms == 3000
    assert [d["scope"] for d in result.directives] == ["broker", "cluster"]


def test_delay_connection_for_other_broker_is_ignored(active: ActiveSet) -> None:
    other = directive(
        quota="max_connection_creation_rate", action="delay_connection", entity={"broker": 2}
    )
    assert active.apply(other) == IGNORED
    default = dict(other, entity={"broker": "<default>"})
    assert active.apply(default) == ADDED
    assert active.connection("10.0.0.1", "PLAINTEXT", T0).delay_ms == 2000


# --------------------------------------------------------------------------- entity matching


def test_user_wide_directive_matches_every_client_id_of_that_user(active: ActiveSet) -> None:
    active.apply(client("alice", ""))
    assert active.request_throttle("alice", "billing", T0).throttle_ms == 2000
    assert active.request_throttle("alice", "", T0).throttle_ms == 2000
    assert active.request_throttle("bob", "billing", T0).throttle_ms == 0


def test_client_id_wide_directive_matches_every_user(active: ActiveSet) -> None:
    active.apply(client("", "billing"))
    assert active.request_throttle("alice", "billing", T0).throttle_ms == 2000
    assert active.request_throttle("bob", "billing", T0).throttle_ms == 2000
    assert active.request_throttle("", "billing", T0).throttle_ms == 2000
    assert active.request_throttle("alice", "other", T0).throttle_ms == 0


def test_exact_pair_matches_only_that_pair(active: ActiveSet) -> None:
    active.apply(client("alice", "billing"))
    assert active.request_throttle("alice", "billing", T0).throttle_ms == 2000
    assert active.request_throttle("alice", "other", T0).throttle_ms == 0
    assert active.request_throttle("bob", "billing", T0).throttle_ms == 0


def test_both_empty_matches_only_empty_client_id_not_everyone(active: ActiveSet) -> None:
    active.apply(client("", ""))
    assert active.request_throttle("alice", "", T0).throttle_ms == 2000
    assert active.request_throttle("", "", T0).throttle_ms == 2000
    assert active.request_throttle("alice", "billing", T0).throttle_ms == 0


def test_missing_entity_key_means_empty(active: ActiveSet) -> None:
    active.apply(directive(entity={"user": "alice"}))
    assert active.request_throttle("alice", "any", T0).throttle_ms == 2000


def test_max_of_several_matching_levels(active: ActiveSet) -> None:
    active.apply(client("alice", "", until=T0 + 1000))
    active.apply(client("", "billing", until=T0 + 5000))
    active.apply(client("alice", "billing", until=T0 + 3000))
    result = active.request_throttle("alice", "billing", T0 + 500)
    assert result.throttle_ms == 4500
    assert result.mute is True
    assert [d["until"] for d in result.directives] == [T0 + 5000, T0 + 3000, T0 + 1000]
    # only the user-wide one matches another client id of alice
    assert active.request_throttle("alice", "web", T0 + 500).throttle_ms == 500


def test_quota_filter_separates_produce_and_fetch(active: ActiveSet) -> None:
    active.apply(client("alice", "", quota="consumer_byte_rate", until=T0 + 4000))
    active.apply(client("alice", "", quota="request_percentage", until=T0 + 1000))
    assert active.request_throttle("alice", "c", T0, PRODUCE_QUOTAS).throttle_ms == 1000
    assert active.request_throttle("alice", "c", T0, FETCH_QUOTAS).throttle_ms == 4000
    assert active.request_throttle("alice", "c", T0).throttle_ms == 4000


def test_mutation_directives_do_not_throttle_requests(active: ActiveSet) -> None:
    active.apply(client("ops", "tf", quota="controller_mutation_rate", action="reject"))
    assert active.request_throttle("ops", "tf", T0).throttle_ms == 0
    assert active.mutation("ops", "tf", T0) == (True, 2000)


def test_mutation_reject_vs_throttle_and_permissive(active: ActiveSet) -> None:
    active.apply(client("ops", "", quota="controller_mutation_rate", action="throttle"))
    assert active.mutation("ops", "tf", T0) == (False, 2000)
    active.apply(
        client("", "tf", quota="controller_mutation_rate", action="reject", until=T0 + 8000)
    )
    assert active.mutation("ops", "tf", T0) == (True, 8000)
    assert active.mutation("ops", "tf", T0, strict=False) == (False, 8000)
    assert active.mutation("ops", "other", T0) == (False, 2000)
    assert active.mutation("dev", "x", T0) == (False, 0)


def test_connection_ip_close_and_listener_delay(active: ActiveSet) -> None:
    active.apply(
        directive(quota="connection_creation_rate", action="close_connection",
                  entity={"ip": "203.0.113.9"})
    )
    active.apply(
        directive(quota="max_connection_creation_rate", action="delay_connection",
                  entity={"broker": LOCAL, "listener": "EXTERNAL"}, until=T0 + 700)
    )
    active.apply(
        directive(quota="max_connection_creation_rate", action="delay_connection",
                  entity={"broker": str(LOCAL)}, until=T0 + 300)
    )
    # the IP's connection is closed when its throttle ends (close_ms), as Kafka's acceptor does
    assert active.connection("203.0.113.9", "EXTERNAL", T0) == (True, 700, 2000)
    assert active.connection("203.0.113.8", "EXTERNAL", T0) == (False, 700, 0)
    assert active.connection("203.0.113.8", "INTERNAL", T0) == (False, 300, 0)
    # the protected inter-broker listener is exempt from the broker-wide rate only
    assert active.connection("203.0.113.8", "INTERNAL", T0, protected_listener=True) == (False, 0, 0)
    assert active.connection("203.0.113.8", "EXTERNAL", T0, protected_listener=True) == (False, 700, 0)


# --------------------------------------------------------------------------- expiry


def test_active_until_exclusive(active: ActiveSet) -> None:
    active.apply(directive(until=T0 + 2000))
    assert active.request_throttle("alice", "x", T0 + 1999).throttle_ms == 1
    assert active.request_throttle("alice", "x", T0 + 2000) == (0, False, ())
    assert active.expire(T0 + 1999) == 0
    assert len(active) == 1
    assert active.expire(T0 + 2000) == 1
    assert len(active) == 0


def test_expire_removes_only_due_entries_and_cleans_index(active: ActiveSet) -> None:
    for i in range(10):
        active.apply(client(f"u{i}", "", until=T0 + 100 * (i + 1)))
    assert active.expire(T0 + 500) == 5
    assert len(active) == 5
    assert active.request_throttle("u4", "x", T0).throttle_ms == 0  # removed, not just filtered
    assert active.request_throttle("u5", "x", T0 + 500).throttle_ms == 100
    assert active._client.get(("u0", "")) is None


def test_expire_skips_replaced_heap_items(active: ActiveSet) -> None:
    active.apply(directive(ts=T0, until=T0 + 1000))
    active.apply(directive(ts=T0 + 1, until=T0 + 5000))
    assert active.expire(T0 + 1000) == 0  # the old heap item is dead, the new one stays
    assert active.request_throttle("alice", "x", T0 + 1000).throttle_ms == 4000


# --------------------------------------------------------------------------- replacement


def test_newer_replaces_even_with_earlier_until(active: ActiveSet) -> None:
    assert active.apply(directive(ts=T0, until=T0 + 9000)) == ADDED
    assert active.apply(directive(ts=T0 + 10, until=T0 + 1000)) == REPLACED
    assert len(active) == 1
    assert active.request_throttle("alice", "x", T0 + 10).throttle_ms == 990


def test_older_ts_is_stale_and_ignored(active: ActiveSet) -> None:
    active.apply(directive(ts=T0 + 10, until=T0 + 1000))
    assert active.apply(directive(ts=T0, until=T0 + 9000)) == STALE
    assert active.request_throttle("alice", "x", T0 + 10).throttle_ms == 990


def test_same_ts_later_record_wins(active: ActiveSet) -> None:
    active.apply(directive(until=T0 + 1000))
    assert active.apply(directive(until=T0 + 3000)) == REPLACED
    assert active.request_throttle("alice", "x", T0).throttle_ms == 3000


def test_lift_removes_existing_directive(active: ActiveSet) -> None:
    active.apply(directive(ts=T0, until=T0 + 9000))
    lift = directive(ts=T0 + 100, until=T0 + 100, throttle_time_ms=0)
    assert active.apply(lift, now=T0 + 100) == LIFTED
    assert len(active) == 0
    assert active.request_throttle("alice", "x", T0 + 100).throttle_ms == 0


def test_lift_without_now_is_stored_but_inactive(active: ActiveSet) -> None:
    active.apply(directive(ts=T0, until=T0 + 9000))
    active.apply(directive(ts=T0 + 100, until=T0 + 100))
    assert active.request_throttle("alice", "x", T0 + 100).throttle_ms == 0
    assert active.expire(T0 + 100) == 1 and len(active) == 0


def test_different_keys_do_not_replace(active: ActiveSet) -> None:
    active.apply(directive(quota="producer_byte_rate", until=T0 + 1000))
    active.apply(directive(quota="request_percentage", until=T0 + 2000))
    active.apply(directive(scope="broker", broker=LOCAL, until=T0 + 500))
    active.apply(client("alice", "billing", until=T0 + 700))
    assert len(active) == 4
    assert len(active.request_throttle("alice", "billing", T0).directives) == 4


def test_heap_is_compacted_under_many_replacements(active: ActiveSet) -> None:
    for i in range(5000):
        active.apply(directive(ts=T0 + i, until=T0 + 10_000_000))
    assert len(active) == 1
    assert len(active._heap) <= 2 * len(active) + 1025


# --------------------------------------------------------------------------- bad input


def test_a_directive_from_the_far_future_is_refused_and_one_from_today_kept(active: ActiveSet) -> None:
    with pytest.raises(BadDirective) as info:
        active.apply(directive(), now=T0 - 2 * 86_400_000)
    assert info.value.reason == "ts_in_future" and len(active) == 0
    assert active.apply(directive(until=T0 + 2**31 - 1), now=T0 - 3_600_000) == ADDED


def test_unknown_fields_are_ignored(active: ActiveSet) -> None:
    assert active.apply(directive(extra={"future": True}, reason="x")) == ADDED


def test_expire_limit_works_in_chunks(active: ActiveSet) -> None:
    for i in range(5):
        active.apply(client(f"u{i}", "", until=T0 + 10))
    assert active.expire(T0 + 10, limit=2) == 2
    assert len(active) == 3
    assert active.expire(T0 + 10, limit=2) == 2
    assert active.expire(T0 + 10, limit=2) == 1
    assert len(active) == 0


# --------------------------------------------------------------------------- model check

_NAMES = st.sampled_from(["", "a", "b"])


@st.composite
def _random_directive(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["client", "mutation", "ip", "listener"]))
    scope = draw(st.sampled_from(["cluster", "broker"]))
    over: dict[str, Any] = {
        "ts": T0 + draw(st.integers(0, 5)),
        "until": T0 + draw(st.integers(0, 20)),
        "scope": scope,
        "broker": draw(st.sampled_from([1, 2])) if scope == "broker" else None,
    }
    if kind == "client":
        over.update(entity={"user": draw(_NAMES), "client_id": draw(_NAMES)},
                    quota=draw(st.sampled_from(["producer_byte_rate", "request_percentage"])))
    elif kind == "mutation":
        over.update(entity={"user": draw(_NAMES), "client_id": draw(_NAMES)},
                    quota="controller_mutation_rate",
                    action=draw(st.sampled_from(["throttle", "reject"])))
    elif kind == "ip":
        over.update(entity={"ip": draw(st.sampled_from(["ip1", "ip2"]))},
                    quota="connection_creation_rate", action="close_connection")
    else:
        entity: dict[str, Any] = {"broker": draw(st.sampled_from([1, 2, "<default>"]))}
        if draw(st.booleans()):
            entity["listener"] = draw(st.sampled_from(["L1", "L2"]))
        over.update(entity=entity, quota="max_connection_creation_rate",
                    action="delay_connection")
    return directive(**over)


def _model(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Brute-force reference: newest ts per replacement key (ties: last), local broker only."""
    latest: dict[str, dict[str, Any]] = {}
    for d in records:
        if d["scope"] == "broker" and d["broker"] != LOCAL:
            continue
        if d["entity"].get("broker") not in (None, LOCAL, "<default>"):
            continue
        key = repr((d["scope"], d["broker"], d["quota"], d["action"],
                    sorted(d["entity"].items())))
        if key not in latest or d["ts"] >= latest[key]["ts"]:
            latest[key] = d
    return list(latest.values())


def _client_match(entity: dict[str, str], user: str, client_id: str) -> bool:
    eu, ec = entity["user"], entity["client_id"]
    return (eu, ec) == (user, client_id) or (eu == "" and ec == client_id) or (
        eu == user != "" and ec == "")


@settings(max_examples=300, deadline=None)
@given(st.lists(_random_directive(), max_size=25), st.integers(0, 21), st.booleans())
def test_matches_brute_force_model(records: list[dict[str, Any]], offset: int,
                                   every_broker: bool) -> None:
    """A broker's own set, and a gateway's set of every broker asked for that broker, both
    answer as the model of the documented rules."""
    if every_broker:
        gateway = ActiveSet(broker_id=None)
        active = _AskingFor(gateway, LOCAL)  # type: ignore[assignment]
    else:
        active = ActiveSet(broker_id=LOCAL)
    for d in records:
        active.apply(d)
    now = T0 + offset
    live = [d for d in _model(records) if d["until"] > now]
    left = lambda ds: max((d["until"] - now for d in ds), default=0)  # noqa: E731
    for user in ("", "a", "b"):
        for client_id in ("", "a", "b"):
            clients = [d for d in live if d["quota"] != "controller_mutation_rate"
                       and "user" in d["entity"] and _client_match(d["entity"], user, client_id)]
            got = active.request_throttle(user, client_id, now)
            assert got.throttle_ms == left(clients)
            assert len(got.directives) == len(clients)
            mutations = [d for d in live if d["quota"] == "controller_mutation_rate"
                         and _client_match(d["entity"], user, client_id)]
            assert active.mutation(user, client_id, now) == (
                any(d["action"] == "reject" for d in mutations), left(mutations))
    for ip in ("ip1", "ip2"):
        for listener in ("L1", "L2"):
            closes = [d for d in live if d["entity"].get("ip") == ip]
            delays = [d for d in live if "broker" in d["entity"]
                      and d["entity"].get("listener", listener) == listener]
            assert active.connection(ip, listener, now)[:2] == (bool(closes), left(delays))
            assert active.connection(ip, listener, now).close_ms == left(closes)
    if not every_broker:
        active.expire(now)
        assert len(active) == len(live)


class _AskingFor:
    """A multi-broker set queried for one broker, with the single-broker query signatures."""

    def __init__(self, active: ActiveSet, broker: int) -> None:
        self.active, self.broker = active, broker

    def apply(self, d: dict[str, Any]) -> str:
        return self.active.apply(d)

    def request_throttle(self, user: str, client_id: str, now: int) -> Any:
        return self.active.request_throttle(user, client_id, now, broker=self.broker)

    def mutation(self, user: str, client_id: str, now: int) -> Any:
        return self.active.mutation(user, client_id, now, broker=self.broker)

    def connection(self, ip: str, listener: str, now: int) -> Any:
        return self.active.connection(ip, listener, now, broker=self.broker)


def test_a_gateway_set_keeps_every_broker_and_answers_per_broker() -> None:
    gateway = ActiveSet(broker_id=None)
    assert gateway.apply(directive(scope="broker", broker=2)) == ADDED
    assert gateway.apply(client("bob", "", scope="broker", broker=1, until=T0 + 500)) == ADDED
    assert gateway.request_throttle("alice", "x", T0, broker=2).throttle_ms == 2000
    assert gateway.request_throttle("alice", "x", T0, broker=1).throttle_ms == 0
    assert gateway.request_throttle("bob", "x", T0, broker=1).throttle_ms == 500
    gateway.apply(directive(quota="max_connection_creation_rate", action="delay_connection",
                            entity={"broker": 3}, scope="broker", broker=3, until=T0 + 300))
    assert gateway.connection("10.0.0.1", "L", T0, broker=3).delay_ms == 300
    assert gateway.connection("10.0.0.1", "L", T0, broker=2).delay_ms == 0
