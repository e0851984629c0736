"""Settings a Kafka client or broker would refuse later, with a traceback, are refused at start
in one line naming the variable, and the CLI exits 2."""

from __future__ import annotations

import pytest

from app.cli import main
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
