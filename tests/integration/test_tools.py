"""`quotas`, `produce` and `directives` against a local Apache Kafka, run in-process via `main`.

Each test gets its own topic names (QS_TOPIC_* and QS_APP_ID), created explicitly with the
product's specs, because the session's broker is shared with other tests.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from app.kafka.topics import create_topics_sync
from app.cli import main
from app.kafka.clients import consumer, producer, topic_exists
from app.kafka.whole_topic import read_topic
from app.pipeline.topology import topic_specs
from app.settings import Settings, load

pytestmark = pytest.mark.integration

T0 = 1_763_800_000_000
TOPIC_VARS = ("QS_TOPIC_REQUEST", "QS_TOPIC_CONNECTION", "QS_TOPIC_MUTATION", "QS_TOPIC_CONFIGS",
              "QS_TOPIC_DIRECTIVES", "QS_TOPIC_DEADLETTER")


def _env(bootstrap: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "QS_APP_ID": f"tools-{tag}", "QS_PARTITIONS": "2"}
    env.update({var: f"tools-{tag}.{var.removeprefix('QS_TOPIC_').lower()}" for var in TOPIC_VARS})
    return env


@pytest.fixture()
def env(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Unique topics for this test, created with the product's partition counts and configs."""
    values = _env(kafka_bootstrap)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    settings = load(values)
    create_topics_sync(kafka_bootstrap, topic_specs(settings))
    return settings


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return orjson.loads(out)


def records(settings: Settings, topic: str) -> list[Any]:
    return asyncio.run(read_topic(settings.kafka_bootstrap_servers, topic))


def test_alter_then_describe_round_trip(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "quotas", "alter", "--entity-type", "users", "--entity-name", "alice",
                         "--entity-type", "clients", "--entity-default",
                         "--add-config", "producer_byte_rate=1048576,request_percentage=50")
    assert code == 0, err
    assert "user-principal 'alice', client-id '<default>'" in out
    assert cli(capsys, "quotas", "alter", "--ip", "10.0.0.1", "--add-config", "connection_creation_rate=5")[0] == 0
    assert cli(capsys, "quotas", "alter", "--broker", "1", "--add-config",
               "listener.name.EXTERNAL.max.connection.creation.rate=30")[0] == 0

    # each record's ts is stamped as it is sent, once connected (tests/unit/admin): Kafka
    # (LogAppendTime) appends it after that, never before
    written = records(env, str(env.topic_configs))
    assert written and all(r.timestamp >= orjson.loads(r.value)["ts"] for r in written)
    rows = cli_json(capsys, "quotas", "describe")
    assert [(r["level"], r["quota"], r["value"]) for r in rows] == [
        ("/config/users/alice/clients/<default>", "producer_byte_rate", 1048576),
        ("/config/users/alice/clients/<default>", "request_percentage", 50),
        ("/config/ips/10.0.0.1", "connection_creation_rate", 5),
        ("/config/brokers/1/listeners/EXTERNAL", "max_connection_creation_rate", 30),
    ]
    one = cli_json(capsys, "quotas", "describe", "--user", "alice", "--client-defaults")
    assert {r["quota"]: (r["value"], r["source"]) for r in one} == {
        "producer_byte_rate": (1048576, "/config/users/alice/clients/<default>"),
        "consumer_byte_rate": (None, None),
        "request_percentage": (50, "/config/users/alice/clients/<default>"),
        "controller_mutation_rate": (None, None),
    }
    code, out, _ = cli(capsys, "quotas", "describe")
    assert out.splitlines()[0].split() == ["LEVEL", "QUOTA", "VALUE"] and "\x1b[" not in out

    # what was written: the contract record, keyed for compaction, on the entity's partition
    (first, *_rest) = records(env, str(env.topic_configs))
    assert first.key == b'{"entity":{"client_id":"<default>","user":"alice"},"keys":["producer_byte_rate","request_percentage"]}'
    value = orjson.loads(first.value)
    assert value["type"] == "quota_config" and value["v"] == 1 and abs(value["ts"] - time.time() * 1000) < 60_000


def test_resolve_shows_the_precedence_level(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--user-defaults", "--add-config", "producer_byte_rate=500"],
                 ["--user", "alice", "--add-config", "producer_byte_rate=1000,consumer_byte_rate=700"],
                 ["--user", "alice", "--client", "app", "--add-config", "producer_byte_rate=2000"]):
        assert cli(capsys, "quotas", "alter", *argv)[0] == 0

    res = {q["quota"]: q for q in cli_json(capsys, "quotas", "resolve", "alice", "app")["quotas"]}
    assert (res["producer_byte_rate"]["limit"], res["producer_byte_rate"]["level"]) == (
        2000, "/config/users/alice/clients/app")
    assert res["producer_byte_rate"]["tags"] == {"user": "alice", "client-id": "app"}
    assert (res["consumer_byte_rate"]["limit"], res["consumer_byte_rate"]["level"]) == (700, "/config/users/alice")
    assert res["consumer_byte_rate"]["tags"] == {"user": "alice", "client-id": ""}
    assert res["request_percentage"]["enabled"] is False

    other = {q["quota"]: q for q in cli_json(capsys, "quotas", "resolve", "alice", "web")["quotas"]}
    assert (other["producer_byte_rate"]["limit"], other["producer_byte_rate"]["level"]) == (1000, "/config/users/alice")
    bob = {q["quota"]: q for q in cli_json(capsys, "quotas", "resolve", "bob", "app")["quotas"]}
    assert (bob["producer_byte_rate"]["limit"], bob["producer_byte_rate"]["level"]) == (500, "/config/users/<default>")

    code, out, _ = cli(capsys, "quotas", "resolve", "alice", "app")
    assert code == 0 and "/config/users/alice/clients/app" in out and "client-id 'app' only" in out


def test_delete_config_removes(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "quotas", "alter", "--user", "carol", "--add-config",
               "producer_byte_rate=100,consumer_byte_rate=200")[0] == 0
    code, out, _ = cli(capsys, "quotas", "alter", "--user", "carol", "--delete-config", "producer_byte_rate")
    assert code == 0 and "producer_byte_rate deleted" in out
    rows = cli_json(capsys, "quotas", "describe", "--entity-type", "users")
    assert [(r["quota"], r["value"]) for r in rows] == [("consumer_byte_rate", 200)]
    # the removal is a record of its own (null value, its own key), not a tombstone
    last = records(env, str(env.topic_configs))[-1]
    assert orjson.loads(last.value)["quotas"] == {"producer_byte_rate": None}
    assert last.key == b'{"entity":{"user":"carol"},"keys":["producer_byte_rate"]}'


def test_invalid_alter_writes_nothing(env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "quotas", "alter", "--user", "dan", "--add-config", "producer_byte_rate=10")[0] == 0
    code, _, err = cli(capsys, "quotas", "alter", "--user", "dan", "--add-config",
                       "producer_byte_rate=20,consumer_byte_rate=1.5")
    assert code == 2 and "consumer_byte_rate: 1.5 must be an integer" in err
    assert len(records(env, str(env.topic_configs))) == 1


def test_describe_does_not_create_a_missing_config_topic(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    values = _env(kafka_bootstrap)
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    code, out, err = cli(capsys, "quotas", "describe")
    assert code == 0 and out.strip() == "no quotas configured" and "does not exist yet" in err

    async def exists() -> bool:
        async with consumer(kafka_bootstrap) as c:
            return await topic_exists(c, values["QS_TOPIC_CONFIGS"])

    assert asyncio.run(exists()) is False


def test_unreachable_broker_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    for argv in (["quotas", "describe"], ["quotas", "alter", "--user", "a", "--add-config", "producer_byte_rate=1"],
                 ["directives", "--idle-timeout", "1"]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and "cannot reach Kafka at 127.0.0.1:1" in err, err


REQ = {"type": "request", "v": 1, "ts": T0, "broker": 1, "user": "alice", "client_id": "app",
       "api": "Produce", "bytes": 10}
CONN = {"type": "connection", "v": 1, "ts": T0, "broker": 1, "listener": "EXTERNAL", "ip": "10.0.0.1"}
MUT = {"type": "mutation", "v": 1, "ts": T0, "broker": 1, "user": "ops", "client_id": "tf",
       "api": "CreateTopics", "api_version": 7, "partitions": 3}
CFG = {"type": "quota_config", "v": 1, "ts": T0, "entity": {"user": "alice"}, "quotas": {"producer_byte_rate": 99}}


def test_produce_routes_lines_to_topics(env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [
        REQ,
        CONN,
        "",
        MUT,
        CFG,
        {"type": "batch", "v": 1, "broker": 2, "events": [REQ | {"bytes": 1}, CONN | {"ip": "10.0.0.2"}, REQ | {"bytes": 2}]},
        "{broken",
        REQ | {"bytes": 3},
    ]
    src = tmp_path / "events.jsonl"
    src.write_bytes(b"\n".join(x.encode() if isinstance(x, str) else orjson.dumps(x) for x in lines) + b"\n")
    code, out, err = cli(capsys, "produce", str(src), "--partition", "1")
    assert code == 0, err
    assert "line 7: not JSON" in err and "1 bad line skipped" in err
    assert f"{env.topic_request}: 3 records" in out and f"{env.topic_configs}: 1 record" in out

    req = records(env, str(env.topic_request))
    assert [orjson.loads(r.value).get("bytes", "batch") for r in req] == [10, "batch", 3]
    assert {r.partition for r in req} == {1}
    assert req[0].key == b'{"client_id":"app","user":"alice"}'
    assert [e["bytes"] for e in orjson.loads(req[1].value)["events"]] == [1, 2]
    conn = records(env, str(env.topic_connection))
    assert [r.key for r in conn] == [b'{"ip":"10.0.0.1"}', b'{"ip":"10.0.0.2"}']
    assert orjson.loads(conn[1].value) == {"type": "batch", "v": 1, "broker": 2, "events": [CONN | {"ip": "10.0.0.2"}]}
    (mut,) = records(env, str(env.topic_mutation))
    assert orjson.loads(mut.value) == MUT
    (cfg,) = records(env, str(env.topic_configs))
    assert cfg.key == b'{"entity":{"user":"alice"},"keys":["producer_byte_rate"]}'
    # and the tools read back what produce wrote
    rows = cli_json(capsys, "quotas", "describe")
    assert [(r["level"], r["value"]) for r in rows] == [("/config/users/alice", 99)]


def test_produce_strict_and_partition_range(env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "events.jsonl"
    src.write_bytes(orjson.dumps(REQ) + b"\n" + orjson.dumps(REQ | {"v": 2}) + b"\n")
    code, _, err = cli(capsys, "produce", str(src), "--strict")
    assert code == 1 and "line 2: unsupported version" in err
    assert records(env, str(env.topic_request)) == []
    code, _, err = cli(capsys, "produce", str(src), "--partition", "5")
    assert code == 2 and "has 2 partitions" in err


def test_produce_reports_bad_events_and_refused_records_and_goes_on(
        env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    huge = {"type": "batch", "v": 1, "broker": 1,  # ~2 MB: over the producer's request size
            "events": [REQ | {"bytes": i} for i in range(15_000)]}
    partly_bad = {"type": "batch", "v": 1, "broker": 1,
                  "events": [REQ | {"bytes": 11}, REQ | {"bytes": -1}, REQ | {"bytes": 12}]}
    src = tmp_path / "events.jsonl"
    src.write_bytes(b"\n".join(orjson.dumps(x) for x in (REQ, huge, partly_bad, REQ | {"bytes": 4}))
                    + b"\n")
    code, out, err = cli(capsys, "produce", str(src), "--partition", "0")
    assert code == 1
    assert "line 2: not sent" in err and "1 record not sent" in err
    assert "line 3: event 2 of the batch: bytes must be >= 0" in err
    assert "1 bad batch event skipped" in err
    req = [orjson.loads(r.value) for r in records(env, str(env.topic_request))]
    assert [r.get("bytes") or [e["bytes"] for e in r["events"]] for r in req] == [10, [11, 12], 4]
    assert f"{env.topic_request}: 3 records" in out


async def _send(bootstrap: str, topic: str, values: list[dict[str, Any]]) -> None:
    async with producer(bootstrap) as p:
        for i, v in enumerate(values):
            await p.send_and_wait(topic, orjson.dumps(v), key=b"k%d" % i, partition=i % 2)


def _directive(n: int) -> dict[str, Any]:
    return {"v": 1, "ts": T0 + n, "scope": "cluster", "broker": None,
            "entity": {"user": f"u{n}", "client_id": ""}, "quota": "producer_byte_rate",
            "action": "throttle", "throttle_time_ms": 100, "until": T0 + n + 100,
            "observed": 600.0, "limit": 500.0, "window_ms": 10500, "config_level": f"/config/users/u{n}"}


def test_directives_prints_the_control_topic(env: Settings, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap, topic = str(env.kafka_bootstrap_servers), str(env.topic_directives)
    old = [_directive(n) for n in range(4)]
    asyncio.run(_send(bootstrap, topic, old))

    code, out, err = cli(capsys, "directives", "--from-beginning", "--idle-timeout", "1.5")
    assert code == 0, err
    printed = [orjson.loads(line) for line in out.splitlines()]
    assert sorted(printed, key=lambda d: d["ts"]) == old

    code, out, _ = cli(capsys, "directives", "--from-beginning", "--max-messages", "1", "--show-meta")
    (meta,) = [orjson.loads(line) for line in out.splitlines()]
    assert set(meta) == {"partition", "offset", "timestamp", "key", "value"} and meta["value"] in old

    # default: from the end; only what arrives after the start is printed. The new directives
    # are sent once the command has found the end of every partition (its seek returned).
    new = [_directive(n) for n in range(10, 13)]
    at_end = threading.Event()
    seek_to_end = AIOKafkaConsumer.seek_to_end

    async def seek_then_tell(self: AIOKafkaConsumer, *partitions: Any) -> bool:
        found = await seek_to_end(self, *partitions)
        at_end.set()
        return bool(found)

    monkeypatch.setattr(AIOKafkaConsumer, "seek_to_end", seek_then_tell)
    sender = threading.Thread(
        target=lambda: at_end.wait(30) and asyncio.run(_send(bootstrap, topic, new)))
    sender.start()
    try:
        code, out, err = cli(capsys, "directives", "--idle-timeout", "6", "--max-messages", "3")
    finally:
        sender.join()
    assert code == 0, err
    assert sorted((orjson.loads(line) for line in out.splitlines()), key=lambda d: d["ts"]) == new
