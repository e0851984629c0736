"""Settings a Kafka client or broker would refuse later, with a traceback, are refused at start
in one line naming the variable, and the CLI exits 2. The README's settings and gateway flag
tables say what `SETTINGS` and the gateway's parser hold."""

from __future__ import annotations

import argparse
import dataclasses
import re
import socket
from pathlib import Path
from typing import get_type_hints

import pytest

from app.cli import build_parser, main
from app.enforcement.local import broker_settings
from app.engine.engine import EngineSettings
from app.errors import reason
from app.settings import SETTINGS, Setting, Settings, SettingsError, attr_name, load


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


def parsed_type(setting: Setting) -> object:
    """What a setting's parser returns: `str` itself, or a parser's return annotation."""
    return setting.parse if isinstance(setting.parse, type) else get_type_hints(setting.parse)["return"]


def test_settings_fields_are_the_table_one_to_one_with_the_parsers_types() -> None:
    """`SETTINGS` is the one list of names, defaults and parsers; `Settings` types each value.
    A setting added to one and not the other, or typed apart from its parser, fails here."""
    hints = get_type_hints(Settings)
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert list(fields) == [attr_name(s.env) for s in SETTINGS]
    for setting in SETTINGS:
        name = attr_name(setting.env)
        assert hints[name] is parsed_type(setting), setting.env
        assert fields[name].repr is not setting.secret, f"{setting.env}: a secret is never shown"


def test_loaded_values_have_their_fields_types_and_secrets_stay_out_of_repr() -> None:
    settings = load({"KAFKA_SASL_PASSWORD": "hunter2-hunter2", "QS_SIGNING_KEYS": "k1:" + "s" * 16,
                     "KAFKA_SSL_CHECK_HOSTNAME": "no", "QS_PARTITIONS": "3"})
    hints = get_type_hints(Settings)
    for f in dataclasses.fields(Settings):
        assert isinstance(getattr(settings, f.name), hints[f.name]), f.name  # type: ignore[arg-type]
    assert (settings.partitions, settings.kafka_ssl_check_hostname) == (3, False)
    assert "hunter2" not in repr(settings) and "s" * 16 not in repr(settings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.partitions = 4  # type: ignore[misc]


def test_the_engine_settings_are_the_settings_windows_scope_and_allocations() -> None:
    """`Settings.engine()` is what the worker, the simulator and the gateway decide with."""
    settings = load({"QS_SCOPE": "cluster", "QS_CLUSTER_ENFORCEMENT": "allocations",
                     "QS_ACCOUNTING": "served", "QS_QUOTA_WINDOW_NUM": "5",
                     "QS_QUOTA_WINDOW_SIZE_MS": "200", "QS_CONTROLLER_WINDOW_NUM": "7",
                     "QS_CONTROLLER_WINDOW_SIZE_MS": "300", "QS_CONFIG_GRACE_MS": "40",
                     "QS_IDLE_EXPIRY_MS": "60000", "QS_ALLOCATION_VALIDITY_MS": "9000",
                     "QS_ALLOCATION_SAMPLE_MS": "50"})
    workers = EngineSettings(scope="cluster", accounting="served", window_num=5, window_ms=200,
                             controller_window_num=7, controller_window_ms=300,
                             config_grace_ms=40, idle_expiry_ms=60_000, allocations=True,
                             allocation_validity_ms=9000, allocation_sample_ms=50)
    assert settings.engine() == workers
    assert load({}).engine() == EngineSettings()  # the defaults are Kafka's, as the engine's
    # allocations are a cluster-scope enforcement: in broker scope the setting is moot
    assert not load({"QS_CLUSTER_ENFORCEMENT": "allocations"}).engine().allocations
    # a gateway's own quota managers: the same windows, decided as one broker decides
    assert broker_settings(settings.engine()) == dataclasses.replace(
        workers, scope="broker", accounting="kafka", allocations=False)


def test_console_editing_is_never_open_without_a_token() -> None:
    with pytest.raises(SettingsError, match="QS_CONSOLE_EDIT=true needs QS_CONSOLE_TOKEN"):
        load({"QS_CONSOLE_EDIT": "true"})
    with pytest.raises(SettingsError, match=r"QS_CONSOLE_TOKEN=<hidden>: must be at least 16"):
        load({"QS_CONSOLE_EDIT": "true", "QS_CONSOLE_TOKEN": "short"})
    settings = load({"QS_CONSOLE_EDIT": "true", "QS_CONSOLE_TOKEN": "x" * 16})
    assert settings.console_edit and "x" * 16 not in repr(settings)


def test_the_advertised_web_host_is_one_the_other_workers_can_reach() -> None:
    assert load({}).advertised_web_host == "127.0.0.1"
    assert load({"QS_WEB_HOST": "0.0.0.0"}).advertised_web_host == socket.gethostname()
    assert load({"QS_WEB_HOST": "0.0.0.0", "QS_WEB_ADVERTISED_HOST": "10.1.2.3"}
                ).advertised_web_host == "10.1.2.3"


# -- the README's tables: what an operator reads is what the code does ---------------------------

README = Path(__file__).resolve().parents[3] / "README.md"
#: how the README writes a default that is the empty string
EMPTY = ("*(empty)*", "(empty)", "(none)")


def settings_tables(first_column: str) -> list[list[list[str]]]:
    """The tables of the README's Settings section whose first column is `first_column`, as
    rows of cells without the header and rule (`\\|` is a `|` inside a cell)."""
    text = README.read_text().split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append([cell.strip().replace("\\|", "|")
                         for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif rows:
            if rows[0][0] == first_column:
                tables.append(rows[2:])
            rows = []
    return tables


def test_the_readmes_settings_table_is_settings() -> None:
    """The README's first table of variables is where operators look a setting up: each one it
    names is read with the default it states, and each setting has a row."""
    rows = settings_tables("variable")[0]
    documented: dict[str, str] = {}
    for name, default, _ in rows:
        env = re.fullmatch(r"`([A-Z_]+)`", name)
        assert env, f"README settings row {name!r}: one `NAME` per row"
        documented[env[1]] = "" if default in EMPTY else default.strip("`")
    assert len(documented) == len(rows), "a variable has two rows"
    assert documented == {s.env: s.default for s in SETTINGS}


def stated_default(action: argparse.Action, stated: str) -> bool:
    """Whether a flag's parser default is the one its README row states: `required`; `off`
    (a switch, or an option off unless given); a number or a `literal`; `QS_NAME` (the
    setting fills it in); anything else describes one computed at start, so none is set."""
    literal = stated.strip("`")
    if stated == "required":
        return action.required
    if stated == "off":
        return not action.required and not action.default
    if re.fullmatch(r"\d+(\.\d+)?", stated):
        return action.default == float(stated)
    if any(s.env == literal for s in SETTINGS):
        return action.default is None
    if re.fullmatch(r"`[^`]+`", stated):
        return action.default == literal
    return action.default is None


def gateway_options() -> dict[str, argparse.Action]:
    """Every flag `quota-streams gateway` takes, but --help, and what parses it."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {flag: action for action in sub.choices["gateway"]._actions
            if not isinstance(action, argparse._HelpAction) for flag in action.option_strings}


def test_the_readmes_gateway_flags_table_is_the_gateways_parser() -> None:
    """Every flag in the README's gateway table is one the gateway takes, with the default the
    row states, and every flag it takes has a row. A row may name several flags (`--a`, `--b`
    or `--a/--b`) with one default each (comma-separated) or one for all."""
    (rows,) = settings_tables("flag")
    options = gateway_options()
    documented: set[str] = set()
    for names, default, _ in rows:
        flags = re.findall(r"--[a-z0-9-]+", names)
        defaults = default.split(", ") if len(default.split(", ")) == len(flags) else (
            [default] * len(flags))
        for flag, stated in zip(flags, defaults):
            assert flag in set(options), f"README's gateway table: {flag} is not a gateway flag"
            assert stated_default(options[flag], stated), (
                f"README's gateway table: {flag} defaults to {stated!r}, the parser to "
                f"{options[flag].default!r} (required: {options[flag].required})")
            documented.add(flag)
    assert set(options) - documented == set(), "gateway flags the README's table leaves out"
