"""Settings a Kafka client or broker would refuse later, with a traceback, are refused at start
in one line naming the variable, and the CLI exits 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from app.cli import main
from app.errors import reason
from app.settings import SettingsError, load


@pytest.mark.parametrize(("env", "value", "says"), [
    ("KAFKA_BOOTSTRAP_SERVERS", "localhost:abc", "host:port"),
    ("KAFKA_BOOTSTRAP_SERVERS", "localhost", "host:port"),
    ("KAFKA_BOOTSTRAP_SERVERS", "a:9092,b:70000", "'b:70000'"),
    ("QS_APP_ID", "", "Kafka's topic names"),
    ("QS_APP_ID", "quota streams", "Kafka's topic names"),
    ("QS_TOPIC_REQUEST", "bad topic!", "Kafka's topic names"),
    ("QS_TOPIC_DIRECTIVES", "..", "Kafka's topic names"),
    ("QS_TOPIC_CONFIGS", "x" * 201, "Kafka's topic names"),
])
def test_bad_values_are_refused_naming_the_variable(env: str, value: str, says: str) -> None:
    with pytest.raises(SettingsError) as info:
        load({env: value})
    assert str(info.value).startswith(f"{env}=") and says in str(info.value)


def test_good_values_pass() -> None:
    settings = load({"KAFKA_BOOTSTRAP_SERVERS": "k1:9092, k2:9093", "QS_APP_ID": "qs-prod_1.a",
                     "QS_TOPIC_REQUEST": "team.quota-events_v2"})
    assert settings.kafka_bootstrap_servers == "k1:9092, k2:9093"
    assert load({}).app_id == "quota-streams"


def test_the_cli_says_it_in_one_line_with_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "localhost:abc")
    assert main(["quotas", "describe"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "KAFKA_BOOTSTRAP_SERVERS='localhost:abc'" in err


def test_a_negative_min_extension_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["replay", "--min-extension-ms", "-1", "-"])
    assert exit_.value.code == 2 and "--min-extension-ms" in capsys.readouterr().err


def test_a_busy_web_port_or_unknown_web_host_stops_the_worker_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setenv("QS_WEB_PORT", str(busy.getsockname()[1]))
        assert main(["worker", "--no-create-topics"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "choose a free port" in err
    monkeypatch.setenv("QS_WEB_HOST", "no-such-host.invalid")
    assert main(["worker", "--no-create-topics"]) == 2
    assert "QS_WEB_HOST=no-such-host.invalid: cannot resolve it" in capsys.readouterr().err


def test_an_unwritable_output_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"type": "request"}\n')
    for option in ("--decisions-out", "--directives-out", "--deadletter-out"):
        code = main(["replay", str(src), option, str(tmp_path / "missing" / "out.jsonl"),
                     "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and err[-1].startswith("quota-streams replay: cannot write"), option


def test_an_error_without_text_still_says_something() -> None:
    assert "no answer in time" in reason(TimeoutError())
    assert reason(ConnectionRefusedError(111, "Connection refused")) == "[Errno 111] Connection refused"
    assert reason(KeyError()) == "KeyError"
