"""The wire contract: each topic's record keys, and one validation of the control records that
every reader shares."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.audit.diff import parse_directive as audit_parse
from app.contract.directives import BadDirective, grouping_problem, parse_directive
from app.contract.keys import (
    broker_source,
    config_key,
    directive_key,
    event_key,
    gateway_source,
)
from app.engine.configs import parse_config_record
from app.engine.events import ConnectionEvent, RequestEvent, parse_event
from app.subscriber.active_set import ActiveSet
from app.subscriber.watcher import DirectiveWatcher
from app.usage.publisher import Source

T0 = 1_763_800_000_000


def directive(**over: Any) -> dict[str, Any]:
    """A valid cluster-scope producer throttle for alice (all client ids), overridable."""
    d: dict[str, Any] = {
        "v": 1, "ts": T0, "scope": "cluster", "broker": None,
        "entity": {"user": "alice", "client_id": ""}, "quota": "producer_byte_rate",
        "action": "throttle", "throttle_time_ms": 2000, "until": T0 + 2000,
        "observed": 600.0, "limit": 500.0, "window_ms": 10500,
        "config_level": "/config/users/alice",
    }
    d.update(over)
    return d


BAD_DIRECTIVES: list[tuple[Any, str]] = [
    ("not a dict", "not_an_object"),
    (directive(v=2), "wrong_version"),
    (directive(v=True), "wrong_version"),
    ({k: v for k, v in directive().items() if k != "v"}, "wrong_version"),
    ({k: v for k, v in directive().items() if k != "until"}, "missing_field"),
    ({k: v for k, v in directive().items() if k != "ts"}, "missing_field"),
    (directive(until="soon"), "wrong_type"),
    (directive(until=1.5), "wrong_type"),
    (directive(until=-1), "negative"),
    (directive(until=2**62), "until_out_of_range"),  # the forged one of the hostile test
    (directive(until=T0 + 2**31), "until_out_of_range"),
    (directive(scope="global"), "bad_scope"),
    (directive(scope="broker", broker=None), "missing_field"),
    (directive(quota="bogus_rate"), "unknown_quota"),
    (directive(action="reject"), "bad_action"),
    (directive(throttle_time_ms=-5), "wrong_type"),
    (directive(entity="alice"), "bad_entity"),
    (directive(entity={}), "bad_entity"),
    (directive(entity={"user": 5, "client_id": ""}), "bad_entity"),
    (directive(quota="connection_creation_rate", action="close_connection",
               entity={"ip": ""}), "bad_entity"),
    (directive(quota="max_connection_creation_rate", action="delay_connection",
               entity={"listener": "X"}), "bad_entity"),
    (directive(quota="max_connection_creation_rate", action="delay_connection",
               entity={"broker": "one"}), "bad_entity"),
]


@pytest.mark.parametrize(("record", "reason"), BAD_DIRECTIVES)
def test_every_reader_refuses_the_same_bad_directives(record: Any, reason: str) -> None:
    """The subscriber's active set (the gateway, the simulated brokers) refuses a bad directive
    with the parser's reason and keeps what it held; the watcher (demo, simulator) never shows
    it in force."""
    with pytest.raises(BadDirective) as info:
        parse_directive(record)
    assert info.value.reason == reason

    active = ActiveSet(broker_id=1)
    active.apply(directive(entity={"user": "bob", "client_id": ""}, until=T0 + 100))
    with pytest.raises(BadDirective) as info:
        active.apply(record)
    assert info.value.reason == reason
    assert len(active) == 1
    assert active.request_throttle("alice", "x", T0).throttle_ms == 0

    watcher = DirectiveWatcher("", "")
    watcher.observe(orjson.dumps(record), T0)
    assert watcher.active(T0) == []


def test_the_readers_key_a_directive_alike() -> None:
    """A later directive of the same window replaces the earlier one for the enforcers and the
    watcher; another window's does not."""
    first, later = directive(), directive(ts=T0 + 1, until=T0 + 5000)
    other = directive(entity={"user": "alice", "client_id": "app"})
    assert parse_directive(first).key == parse_directive(later).key != parse_directive(other).key
    watcher = DirectiveWatcher("", "")
    for d in (first, later, other):
        watcher.observe(orjson.dumps(d), T0)
    assert watcher.active(T0) == [later, other]


def test_the_audit_pairs_by_a_weaker_check_than_the_enforcers_obey() -> None:
    """The audit reports a wrong field as a difference: it refuses only a record it cannot
    group (`grouping_problem`), and reads the ones the enforcers refuse for their fields."""
    assert grouping_problem([1]) == "not a JSON object"
    assert grouping_problem(directive(ts="x")) == "ts missing or not an integer"
    assert grouping_problem(directive(broker="1")) == "broker must be an integer or null"
    assert grouping_problem(directive()) is None
    assert audit_parse(b'{"ts": "x"}')[1] == "ts missing or not an integer"
    assert audit_parse(orjson.dumps(directive(action="reject")))[0] == directive(action="reject")


def test_control_topic_key_is_quota_and_entity_json() -> None:
    assert directive_key(directive()) == b'producer_byte_rate|{"user":"alice","client_id":""}'
    with pytest.raises(KeyError):
        directive_key({"quota": "producer_byte_rate"})


def test_source_keys() -> None:
    assert gateway_source(3, 3) == b"gateway/3"
    assert gateway_source(None, 77) == b"gateway/unnamed-77"
    assert broker_source(2) == b"broker/2"
    assert Source.gateway(5) == (b"gateway/5", 5)
    assert Source.broker(2) == (b"broker/2", 2)
    unnamed = Source.gateway(None)
    assert unnamed.key == gateway_source(None, unnamed.number)


def test_event_keys_are_canonical_principals() -> None:
    request = parse_event({"v": 1, "type": "request", "ts": T0, "broker": 1, "user": "a",
                           "client_id": "c", "api": "Produce"})
    connection = parse_event({"v": 1, "type": "connection", "ts": T0, "broker": 1,
                              "listener": "L", "ip": "10.0.0.1"})
    assert isinstance(request, RequestEvent) and isinstance(connection, ConnectionEvent)
    assert event_key(request) == b'{"client_id":"c","user":"a"}'
    assert event_key(connection) == b'{"ip":"10.0.0.1"}'


def test_config_key_is_entity_and_sorted_quota_keys() -> None:
    update = parse_config_record({"type": "quota_config", "v": 1, "ts": T0,
                                  "entity": {"user": "alice", "client_id": "<default>"},
                                  "quotas": {"producer_byte_rate": 1, "consumer_byte_rate": 2}})
    assert config_key(update) == (b'{"entity":{"client_id":"<default>","user":"alice"},'
                                  b'"keys":["consumer_byte_rate","producer_byte_rate"]}')
