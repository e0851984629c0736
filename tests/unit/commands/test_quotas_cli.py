"""`quotas`, `produce`, `directives` without Kafka: arguments, validation, keys, rendering, routing."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.admin import views
from app.admin.config_topic import apply_values, entity_partition, level_path
from app.contract.keys import config_key
from app.admin.entities import (
    build_records,
    canonical_record,
    parse_add_config,
    parse_delete_config,
    parse_entity,
)
from app.admin.routing import BadLine, route_line
from app.cli import build_parser, main
from app.commands.directives import format_record
from app.engine.configs import DEFAULT, QuotaConfigs, parse_config_record
from app.errors import UserError
from app.signing import Signing

T0 = 1_763_800_000_000


def entity_parts(*argv: str) -> Any:
    args = build_parser().parse_args(["quotas", "alter", *argv])
    return args.entity_parts


def spec(*argv: str, require_names: bool = True) -> Any:
    return parse_entity(entity_parts(*argv), require_names=require_names)


def config(entity: dict[str, Any], ts: int = T0, **quotas: Any) -> dict[str, Any]:
    return {"type": "quota_config", "v": 1, "ts": ts, "entity": entity, "quotas": quotas}


def load(*records: dict[str, Any]) -> QuotaConfigs:
    loaded = apply_values((orjson.dumps(r) for r in records), signing=Signing())
    assert not loaded.bad, loaded.bad
    return loaded.configs


@pytest.fixture()
def no_kafka(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Any attempt to write to Kafka is recorded instead (and must not happen on errors)."""
    calls: list[Any] = []

    async def fake_write(*args: Any, **kwargs: Any) -> None:
        calls.append(args)

    monkeypatch.setattr("app.admin.config_topic.write_records", fake_write)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    return calls


# -- entity options ---------------------------------------------------------------------------

def test_entity_options_pair_like_kafka_configs() -> None:
    s = spec("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-default")
    assert s.entity() == {"user": "alice", "client_id": DEFAULT}
    assert s.complete


def test_shorthands_are_the_same_entity() -> None:
    assert spec("--user", "alice", "--client-defaults").entity() == {"user": "alice", "client_id": DEFAULT}
    assert spec("--entity-type", "user", "--entity-name", "bob").entity() == {"user": "bob"}
    assert spec("--broker", "3").entity() == {"broker": 3}
    assert spec("--ip-defaults").entity() == {"ip": DEFAULT}


def test_name_applies_to_the_type_before_it() -> None:
    s = spec("--entity-type", "clients", "--entity-name", "app", "--entity-type", "users", "--entity-name", "bob")
    assert s.entity() == {"client_id": "app", "user": "bob"}


@pytest.mark.parametrize("argv, message", [
    (["--entity-name", "alice"], "must follow an --entity-type"),
    (["--entity-type", "topics", "--entity-name", "t"], "unknown --entity-type 'topics'"),
    (["--entity-type", "users", "--entity-name", "a", "--entity-name", "b"], "more than one"),
    (["--entity-type", "users", "--entity-type", "users"], "given twice"),
    (["--entity-type", "users"], "needs --entity-name NAME or --entity-default"),
    (["--broker", "one"], "broker id"),
    ([], "name an entity"),
])
def test_entity_option_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        spec(*argv)


def test_describe_filter_may_omit_names() -> None:
    s = spec("--entity-type", "users", require_names=False)
    assert not s.complete
    assert s.matches({"user": "alice"}) and not s.matches({"user": "alice", "client_id": "x"})
    with pytest.raises(UserError, match="only users and clients"):
        spec("--entity-type", "users", "--entity-type", "ips", require_names=False)


# -- --add-config / --delete-config -----------------------------------------------------------

def test_add_and_delete_config_parsing() -> None:
    assert parse_add_config("producer_byte_rate=1048576, request_percentage=12.5") == {
        "producer_byte_rate": 1048576, "request_percentage": 12.5}
    assert parse_add_config("producer_byte_rate=abc") == {"producer_byte_rate": "abc"}
    assert parse_delete_config("a,b,a") == ["a", "b"]
    for bad in ("producer_byte_rate", "x=", "=1", "a=1,,b=2"):
        with pytest.raises(UserError):
            parse_add_config(bad)
    with pytest.raises(UserError, match="given twice"):
        parse_add_config("a=1,a=2")
    with pytest.raises(UserError, match="keys only"):
        parse_delete_config("a=1")


@pytest.mark.parametrize("argv, message", [
    (["--user", "bob", "--add-config", "producer_byte_rate=0"], "producer_byte_rate: 0 must be greater than 0"),
    (["--user", "bob", "--add-config", "producer_byte_rate=1.5"], "must be an integer"),
    (["--user", "bob", "--add-config", "request_percentage=-1"], "must be greater than 0"),
    (["--ip", "10.0.0.1", "--add-config", "connection_creation_rate=2.5"], "must be an integer"),
    (["--user", "bob", "--add-config", "producer_byte_rate=abc"], "is not a number"),
    (["--user", "bob", "--add-config", "producer_byte_rate=nan"], "is not a number"),
    (["--user", "bob", "--add-config", "connection_creation_rate=5"], "unknown quota 'connection_creation_rate'"),
    (["--user", "bob", "--ip", "10.0.0.1", "--add-config", "producer_byte_rate=5"], "an ip entity cannot be combined"),
    (["--ip", "not-an-ip", "--add-config", "connection_creation_rate=5"], "is not an IP address"),
    (["--user", "", "--add-config", "producer_byte_rate=5"], "empty user is not supported"),
    (["--user", "bob"], "nothing to change"),
    (["--user", "bob", "--add-config", "producer_byte_rate=5", "--delete-config", "producer_byte_rate"],
     "in both --add-config and --delete-config"),
])
def test_invalid_alter_is_one_line_exit_2_and_writes_nothing(
    argv: list[str], message: str, no_kafka: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quotas", "alter", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert no_kafka == []


def test_valid_alter_writes_the_validated_record(no_kafka: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quotas", "alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                 "clients", "--entity-default", "--add-config", "producer_byte_rate=1048576.0000001",
                 "--delete-config", "consumer_byte_rate", "--json"]) == 0
    (_bootstrap, topic, records, topic_spec), = no_kafka
    assert topic == "quota.configs" and topic_spec[1:] == (
        1, {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"})
    (record, update), = records
    assert record["entity"] == {"user": "alice", "client_id": DEFAULT}
    assert record["quotas"] == {"producer_byte_rate": 1048576, "consumer_byte_rate": None}
    assert parse_config_record(record) == update
    assert orjson.loads(capsys.readouterr().out) == record


def test_broker_listener_keys_become_one_record_per_listener() -> None:
    records = build_records(spec("--broker-defaults"), parse_add_config(
        "max.connection.creation.rate=100,listener.name.EXTERNAL.max.connection.creation.rate=30"), [], T0)
    assert [r for r, _ in records] == [
        config({"broker": DEFAULT}, max_connection_creation_rate=100),
        config({"broker": DEFAULT, "listener": "EXTERNAL"}, max_connection_creation_rate=30),
    ]


def test_ip_is_normalised_in_record_and_key() -> None:
    (record, update), = build_records(spec("--ip", "::0001"), {"connection_creation_rate": 5}, [], T0)
    assert record["entity"] == {"ip": "::1"}
    assert config_key(update) == b'{"entity":{"ip":"::1"},"keys":["connection_creation_rate"]}'


def test_missing_bootstrap_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    for argv in (["quotas", "describe"], ["quotas", "resolve", "a", "b"], ["directives"], ["produce", "-"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "KAFKA_BOOTSTRAP_SERVERS is not set" in err and "quota-streams broker" in err
        assert err.count("\n") == 1


# -- the record key and compaction ------------------------------------------------------------

def test_config_key_is_canonical() -> None:
    a = parse_config_record(config({"user": "alice", "client_id": DEFAULT},
                                   producer_byte_rate=1, consumer_byte_rate=None))
    b = parse_config_record(config({"client_id": DEFAULT, "user": "alice"}, ts=T0 + 5,
                                   consumer_byte_rate=7, producer_byte_rate=9))
    expected = b'{"entity":{"client_id":"<default>","user":"alice"},"keys":["consumer_byte_rate","producer_byte_rate"]}'
    assert config_key(a) == config_key(b) == expected
    c = parse_config_record(config({"user": "alice", "client_id": DEFAULT}, producer_byte_rate=1))
    assert config_key(c) != config_key(a)  # other quota set: another key
    assert entity_partition(a, 8) == entity_partition(c, 8)  # but the same partition


ENTITIES = [{"user": "alice"}, {"user": DEFAULT}, {"user": "alice", "client_id": "app"}, {"client_id": "app"}]
KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]
record_strategy = st.builds(
    lambda e, qs: config(ENTITIES[e], **qs),
    st.integers(0, len(ENTITIES) - 1),
    st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), st.integers(1, 5)), min_size=1),
)


def compact(records: list[dict[str, Any]], keep_superseded: list[bool], key: Any) -> list[dict[str, Any]]:
    """Kafka log compaction: the latest record per key stays; older ones may or may not be gone."""
    latest = {key(r): i for i, r in enumerate(records)}
    return [r for i, r in enumerate(records)
            if latest[key(r)] == i or keep_superseded[i % len(keep_superseded)]]


def state(records: list[dict[str, Any]]) -> list[Any]:
    return sorted(map(repr, load(*records).entries()))


@settings(max_examples=300, deadline=None)
@given(st.lists(record_strategy, max_size=25), st.lists(st.booleans(), min_size=1, max_size=25))
def test_compaction_with_the_key_never_changes_the_configs(records: list[dict[str, Any]], keep: list[bool]) -> None:
    def key(r: dict[str, Any]) -> bytes:
        return config_key(parse_config_record(r))

    assert state(compact(records, keep, key)) == state(records)


def test_an_entity_only_key_would_lose_a_quota() -> None:
    records = [config({"user": "alice"}, producer_byte_rate=10), config({"user": "alice"}, consumer_byte_rate=20)]
    by_entity = compact(records, [False], lambda r: orjson.dumps(r["entity"]))
    assert state(by_entity) != state(records)
    assert state(compact(records, [False], lambda r: config_key(parse_config_record(r)))) == state(records)


# -- describe / resolve -----------------------------------------------------------------------

CONFIGS = [
    config({"user": DEFAULT}, producer_byte_rate=500),
    config({"user": "alice"}, producer_byte_rate=1000, request_percentage=50),
    config({"user": "alice", "client_id": DEFAULT}, consumer_byte_rate=2000),
    config({"client_id": "app"}, controller_mutation_rate=1.5),
    config({"ip": DEFAULT}, connection_creation_rate=20),
    config({"broker": DEFAULT}, max_connection_creation_rate=100),
    config({"broker": 2, "listener": "EXTERNAL"}, max_connection_creation_rate=30),
]


def test_describe_all_rows_and_filter() -> None:
    rows = views.describe_all(load(*CONFIGS))
    assert [(r["level"], r["quota"], r["value"]) for r in rows] == [
        ("/config/clients/app", "controller_mutation_rate", 1.5),
        ("/config/users/<default>", "producer_byte_rate", 500),
        ("/config/users/alice", "producer_byte_rate", 1000),
        ("/config/users/alice", "request_percentage", 50),
        ("/config/users/alice/clients/<default>", "consumer_byte_rate", 2000),
        ("/config/ips/<default>", "connection_creation_rate", 20),
        ("/config/brokers/2/listeners/EXTERNAL", "max_connection_creation_rate", 30),
        ("/config/brokers/<default>", "max_connection_creation_rate", 100),
    ]
    users = views.describe_all(load(*CONFIGS), spec("--entity-type", "users", require_names=False))
    assert {r["level"] for r in users} == {"/config/users/<default>", "/config/users/alice"}


def test_describe_one_shows_where_each_value_comes_from() -> None:
    configs = load(*CONFIGS)
    rows = {r["quota"]: r for r in views.describe_one(configs, spec("--user", "bob"))}
    assert rows["producer_byte_rate"]["value"] == 500
    assert rows["producer_byte_rate"]["source"] == "/config/users/<default>" and rows["producer_byte_rate"]["inherited"]
    assert rows["request_percentage"]["value"] is None and rows["request_percentage"]["source"] is None
    rows = {r["quota"]: r for r in views.describe_one(configs, spec("--user", "alice"))}
    assert rows["request_percentage"]["source"] == "/config/users/alice" and not rows["request_percentage"]["inherited"]
    ip = views.describe_one(configs, spec("--ip", "10.0.0.9"))
    assert [(r["value"], r["source"]) for r in ip] == [(20, "/config/ips/<default>")]
    broker = views.describe_one(configs, spec("--broker", "2"))
    assert [(r["level"], r["value"], r["inherited"]) for r in broker] == [
        ("/config/brokers/2", 100, True), ("/config/brokers/2/listeners/EXTERNAL", 30, False)]


def test_describe_rendering_plain_and_coloured() -> None:
    configs = load(*CONFIGS)
    rows = views.describe_one(configs, spec("--user", "bob"))
    plain = views.render_describe_one(rows, colour=False)
    assert "\x1b[" not in plain
    lines = plain.splitlines()
    assert lines[0] == "Quotas for user-principal 'bob' (/config/users/bob)"
    assert lines[1].split() == ["QUOTA", "VALUE", "FROM"]
    assert lines[2].split() == ["producer_byte_rate", "500", "/config/users/<default>", "(inherited)"]
    assert "quotas resolve" in lines[-1]
    coloured = views.render_describe_one(rows, colour=True)
    assert "\x1b[" in coloured and views.strip_ansi(coloured) == plain
    table = views.render_describe_all(views.describe_all(configs), colour=False).splitlines()
    assert table[0].split() == ["LEVEL", "QUOTA", "VALUE"]
    assert table[1].split() == ["/config/clients/app", "controller_mutation_rate", "1.5"]
    assert views.render_describe_all([], colour=False) == "no quotas configured"


def test_use_colour_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = SimpleNamespace(isatty=lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert views.use_colour(tty)  # type: ignore[arg-type]
    assert not views.use_colour(SimpleNamespace(isatty=lambda: False))  # type: ignore[arg-type]
    monkeypatch.setenv("NO_COLOR", "1")
    assert not views.use_colour(tty)  # type: ignore[arg-type]


def test_resolve_rows_levels_and_tags() -> None:
    configs = load(*CONFIGS, config({"user": "alice", "client_id": "app"}, producer_byte_rate=3000))
    rows = {r["quota"]: r for r in views.resolve_rows(configs, "alice", "app")}
    assert rows["producer_byte_rate"]["limit"] == 3000
    assert rows["producer_byte_rate"]["level"] == "/config/users/alice/clients/app"
    assert rows["producer_byte_rate"]["tags"] == {"user": "alice", "client-id": "app"}
    assert rows["request_percentage"]["level"] == "/config/users/alice"
    assert rows["request_percentage"]["tags"] == {"user": "alice", "client-id": ""}
    assert rows["controller_mutation_rate"]["tags"] == {"user": "", "client-id": "app"}
    bob = {r["quota"]: r for r in views.resolve_rows(configs, "bob", "other")}
    assert bob["producer_byte_rate"]["level"] == "/config/users/<default>"
    assert bob["consumer_byte_rate"]["limit"] is None and bob["consumer_byte_rate"]["level"] is None
    empty = views.resolve_rows(QuotaConfigs(), "bob", "x")
    assert all(not r["enabled"] for r in empty)
    text = views.render_resolve("alice", "app", list(rows.values()), colour=False)
    assert "user 'alice' with client-id 'app' only" in text and "all its client ids" in text


def test_level_paths() -> None:
    assert level_path({"user": "a", "client_id": DEFAULT}) == "/config/users/a/clients/<default>"
    assert level_path({"client_id": "c"}) == "/config/clients/c"
    assert level_path({"ip": "1.2.3.4"}) == "/config/ips/1.2.3.4"
    assert level_path({"broker": 1, "listener": "L"}) == "/config/brokers/1/listeners/L"


def test_bad_records_are_skipped_like_the_workers() -> None:
    loaded = apply_values([b"{nope", orjson.dumps(config({"user": "a"}, producer_byte_rate=0)),
                           orjson.dumps(config({"user": "a"}, producer_byte_rate=10)), None],
                          signing=Signing())
    assert loaded.records == 4 and len(loaded.bad) == 3
    assert loaded.configs.entries() == [("client", {"user": "a"}, "producer_byte_rate", 10.0)]


def test_canonical_record_round_trips() -> None:
    update = parse_config_record(config({"ip": "10.0.0.1"}, connection_creation_rate=5.0))
    assert canonical_record(update) == config({"ip": "10.0.0.1"}, connection_creation_rate=5)


# -- produce routing --------------------------------------------------------------------------

REQ = {"type": "request", "v": 1, "ts": T0, "broker": 1, "user": "alice", "client_id": "app",
       "api": "Produce", "bytes": 10}
CONN = {"type": "connection", "v": 1, "ts": T0, "broker": 1, "listener": "EXTERNAL", "ip": "10.0.0.1"}
MUT = {"type": "mutation", "v": 1, "ts": T0, "broker": 1, "user": "ops", "client_id": "tf",
       "api": "CreateTopics", "api_version": 7, "partitions": 3}


def test_route_single_events_and_configs() -> None:
    (out,) = route_line(orjson.dumps(REQ) + b"\n").records
    assert (out.kind, out.key, out.value) == ("request", b'{"client_id":"app","user":"alice"}', orjson.dumps(REQ))
    assert route_line(orjson.dumps(CONN)).records[0].key == b'{"ip":"10.0.0.1"}'
    assert route_line(orjson.dumps(MUT)).records[0].kind == "mutation"
    cfg = config({"user": "alice"}, producer_byte_rate=1)
    (out,) = route_line(orjson.dumps(cfg)).records
    assert out.kind == "config" and out.key == b'{"entity":{"user":"alice"},"keys":["producer_byte_rate"]}'


def test_a_batch_keeps_its_good_events_and_says_why_the_others_were_left_out() -> None:
    batch = {"type": "batch", "v": 1, "broker": 2,
             "events": [REQ, REQ | {"bytes": -1}, CONN, REQ | {"bytes": 7}]}
    routed = route_line(orjson.dumps(batch), 9)
    assert routed.skipped == ["event 2 of the batch: bytes must be >= 0"]
    by_kind = {o.kind: o for o in routed.records}
    assert orjson.loads(by_kind["request"].value)["events"] == [REQ, REQ | {"bytes": 7}]
    assert orjson.loads(by_kind["connection"].value)["events"] == [CONN]
    assert {o.line for o in routed.records} == {9}


def test_route_batches() -> None:
    same = {"type": "batch", "v": 1, "broker": 2, "events": [REQ | {"user": "bob"}, REQ]}
    (out,) = route_line(orjson.dumps(same)).records
    assert out.kind == "request" and out.key == b'{"client_id":"app","user":"bob"}'
    assert out.value == orjson.dumps(same)
    mixed = {"type": "batch", "v": 1, "broker": 2,
             "events": [REQ, CONN, REQ | {"bytes": 5}, config({"user": "x"}, producer_byte_rate=1)]}
    outs = route_line(orjson.dumps(mixed)).records
    by_kind = {o.kind: o for o in outs}
    assert sorted(by_kind) == ["config", "connection", "request"]
    assert orjson.loads(by_kind["request"].value) == {"type": "batch", "v": 1, "broker": 2,
                                                      "events": [REQ, REQ | {"bytes": 5}]}
    assert orjson.loads(by_kind["connection"].value)["events"] == [CONN]
    assert by_kind["config"].update is not None


@pytest.mark.parametrize("line, reason", [
    (b"{nope", "not JSON"),
    (b"[1]", "not a JSON object"),
    (orjson.dumps(REQ | {"v": 2}), "unsupported version"),
    (orjson.dumps({"type": "batch", "v": 1, "events": []}), "batch has no events"),
    (orjson.dumps({"type": "batch", "v": 1, "events": [REQ | {"bytes": -1}]}), "no good event"),
    (orjson.dumps(config({"user": "a"}, producer_byte_rate=0)), "greater than 0"),
])
def test_bad_lines(line: bytes, reason: str) -> None:
    with pytest.raises(BadLine, match=reason):
        route_line(line)


def test_produce_strict_sends_nothing(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    src = tmp_path / "in.jsonl"
    src.write_bytes(orjson.dumps(REQ) + b"\n\n{bad\n")
    assert main(["produce", str(src), "--strict"]) == 1
    err = capsys.readouterr().err
    assert "line 3: not JSON" in err and "nothing sent" in err
    assert main(["produce", str(tmp_path / "missing.jsonl")]) == 2


def test_directive_lines() -> None:
    rec = SimpleNamespace(value=b'{"v": 1, "quota": "q"}', key=b"k", partition=1, offset=7, timestamp=5)
    assert format_record(rec, show_meta=False) == '{"v":1,"quota":"q"}'
    assert orjson.loads(format_record(rec, show_meta=True) or "") == {
        "partition": 1, "offset": 7, "timestamp": 5, "key": "k", "value": {"v": 1, "quota": "q"}}
    assert format_record(SimpleNamespace(value=b"junk", key=None, partition=0, offset=1, timestamp=0), False) is None


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["quotas"], ["quotas", "alter"], ["quotas", "describe"], ["quotas", "resolve"],
                 ["produce"], ["directives"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args([*argv, "--help"])
        assert exc.value.code == 0
        assert "usage: quota-streams" in capsys.readouterr().out


def test_entity_part_action_does_not_share_state() -> None:
    p = argparse.ArgumentParser()
    from app.admin.entities import add_entity_options

    add_entity_options(p)
    a = p.parse_args(["--user", "a"])
    b = p.parse_args([])
    assert a.entity_parts == [("type", "users"), ("name", "a")] and b.entity_parts is None
