"""`explain` over a JSON-lines file: the numbers it prints are the engine's."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from app.audit import synth
from app.audit.explain import explain, read_files
from app.explanation import render
from app.cli import main
from app.engine.engine import EngineSettings

T0 = synth.T0


def write(tmp_path: Path, records: list[dict]) -> Path:  # type: ignore[type-arg]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    return path


def produce(ts: int, nbytes: int, user: str = "alice", client: str = "app") -> dict:  # type: ignore[type-arg]
    return {"type": "request", "v": 1, "ts": ts, "broker": 1, "user": user, "client_id": client,
            "api": "Produce", "bytes": nbytes}


CONFIG = {"type": "quota_config", "v": 1, "ts": 0, "entity": {"user": "alice"},
          "quotas": {"producer_byte_rate": 500}}


def test_kafka_vector_throttle_formula(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ClientQuotaManagerTest#testQuotaViolation: 6300 B over 10.5 s at 500 B/s -> 2100 ms."""
    # 10 samples of 600 B (one per second) then 300 B at 10.5 s: O = 6300 / 10.5 = 600 B/s
    records = [CONFIG] + [produce(T0 + i * 1000, 600) for i in range(10)] + [produce(T0 + 10500, 300)]
    path = write(tmp_path, records)
    code = main(["explain", "--entity", "user=alice,client_id=app", "--at", str(T0 + 10600),
                 "--input", str(path), "--window-num", "11"])
    out = capsys.readouterr().out
    assert code == 0
    assert "producer_byte_rate · window user=alice · broker 1" in out
    assert "from /config/users/alice" in out
    assert "O = sum / window = 6,300 / 10.500 s = 600 B/s" in out
    assert "round((600 - 500) / 500 * 10500) = round(2,100) = 2,100 ms" in out
    assert '"throttle_time_ms":2100' in out
    assert out.count("start 2025-11-22") == 11


def test_explain_prefix_and_unknown_entity(tmp_path: Path) -> None:
    records = [CONFIG] + [produce(T0 + i * 100, 400) for i in range(50)]
    mode, streams, recs, points = read_files([str(write(tmp_path, records))])
    result = explain({"user": "alice"}, T0 + 1000, EngineSettings(), mode, streams, recs, points)
    (snap,) = result.windows.values()
    assert snap.decision.ts == T0 + 1000  # the last decision at or before --at
    assert "directive" in render(result, EngineSettings())
    none = explain({"user": "zed"}, T0 + 1000, EngineSettings(), mode, streams, recs, points)
    assert not none.windows and "no decision" in render(none, EngineSettings())


def test_explain_sees_other_principals_sharing_the_window(tmp_path: Path) -> None:
    """A client-id quota is shared by every user of the client id: all of them count."""
    config = {"type": "quota_config", "v": 1, "ts": 0, "entity": {"client_id": "app"},
              "quotas": {"producer_byte_rate": 1000}}
    records = [config] + [produce(T0 + i * 100, 300, user=f"u{i % 3}") for i in range(60)]
    mode, streams, recs, points = read_files([str(write(tmp_path, records))])
    result = explain({"user": "u0", "client_id": "app"}, T0 + 6000, EngineSettings(), mode,
                     streams, recs, points)
    (snap,) = result.windows.values()
    assert result.events_used == 60  # u1 and u2 fill the same window
    assert snap.decision.entity == {"user": "", "client_id": "app"}


def test_explain_shows_what_each_enforcer_was_allowed_with_allocations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Cluster scope with allocations: the window's last allocation, enforcer by enforcer, and
    why; named gateways are the enforcers, whatever broker they front. Asked at the first
    allocation: these events obey none, and a gateway admitting more than its allocation keeps
    it while its window holds more (`allocation.kept`), leaving the other only the rest."""
    records = [CONFIG]
    for i in range(40):  # gateway 5 at 1500 B/s (saturated), gateway 6 at 100 B/s
        records.append({**produce(T0 + i * 100, 150), "gateway": 5})
        records.append({**produce(T0 + i * 100, 10), "broker": 2, "gateway": 6})
    path = write(tmp_path, records)
    code = main(["explain", "--entity", "user=alice", "--at", str(T0 + 2500), "--input", str(path),
                 "--scope", "cluster", "--accounting", "served", "--allocations"])
    out = capsys.readouterr().out
    assert code == 0
    assert "producer_byte_rate · window user=alice · all brokers (cluster scope)" in out
    assert "enforcers hold it per request (no directive" in out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if "enforcer 5:" in line
             or "enforcer 6:" in line}
    assert "saturated: shares the rest" in lines["enforcer 5"]
    assert "unsaturated: usage x 1.25" in lines["enforcer 6"]
    # a gateway's throttle repays a debt: its bound is its allocation, never trimmed
    assert "its bound" not in lines["enforcer 5"] and "its bound" not in lines["enforcer 6"]
    assert '"throttle_time_ms"' not in out  # no directive for an allocated quota


def test_explain_says_when_a_brokers_bound_is_trimmed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Brokers running the plugin mute by Kafka's formula: broker 1 admits far more than its
    allocation (these events obey none), so its bound is trimmed and the line says so; broker
    2 admits less than its."""
    records = [CONFIG]
    for i in range(40):
        records.append(produce(T0 + i * 100, 150))
        records.append({**produce(T0 + i * 100, 10), "broker": 2})
    path = write(tmp_path, records)
    assert main(["explain", "--entity", "user=alice", "--at", str(T0 + 2500), "--input",
                 str(path), "--scope", "cluster", "--accounting", "served", "--allocations"]) == 0
    lines = {line.split(":")[0].strip(): line for line in capsys.readouterr().out.splitlines()
             if "enforcer 1:" in line or "enforcer 2:" in line}
    assert "of its allocation (it admitted more than that)" in lines["enforcer 1"]
    assert "its bound" not in lines["enforcer 2"]


def test_explain_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--entity", "nobody", "--at", "1", "--input", "x.jsonl"]) == 2
    assert main(["explain", "--entity", "user=a", "--at", "soon", "--input", "x.jsonl"]) == 2
    assert main(["explain", "--entity", "user=a", "--at", "1", "--input",
                 str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and err.count("quota-streams explain:") == 3


def test_audit_cli_help_and_argument_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["audit", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--input", "--control", "--from", "--tolerance", "--master", "--entity",
                 "--starting-offsets", "--headroom"):
        assert flag in out
    assert main(["audit", "--from", "later"]) == 2
    assert main(["audit", "--input", "x.jsonl", "--starting-offsets", "{}"]) == 2
    assert main(["audit", "--from", "2000", "--to", "1000"]) == 2
    assert main(["audit", "--bootstrap", ""]) == 2  # kafka input without a bootstrap
    assert main(["audit", "--input", "/nonexistent/x.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "KAFKA_BOOTSTRAP_SERVERS" in err and "does not exist" in err


def test_a_produces_time_after_its_bytes_reads_as_one_request(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The gateway charges a Produce's bytes as it forwards it and its time when the answer
    comes (`count` 0): explain says so rather than showing a request of 0 bytes."""
    time_alone = {**produce(T0 + 600, 0), "thread_time_ms": 2.5, "count": 0}
    config = {**CONFIG, "quotas": {"producer_byte_rate": 500, "request_percentage": 50}}
    path = write(tmp_path, [config, produce(T0 + 500, 900), time_alone])
    code = main(["explain", "--entity", "user=alice", "--at", str(T0 + 700), "--input", str(path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "Produce from user='alice' client_id='app' on broker 1, 900 bytes" in out
    assert "thread 2.5 ms, network 0.0 ms, the time of a request counted with its bytes" in out
