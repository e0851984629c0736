"""`quota-streams replay` end to end on temporary files, through `app.cli.main`."""

from __future__ import annotations

import bz2
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.cli import main

T0 = 1_763_800_000_000


def line(obj: Any) -> str:
    return json.dumps(obj)


def request(ts: int, nbytes: int, **extra: Any) -> dict[str, Any]:
    return {
        "type": "request",
        "v": 1,
        "ts": ts,
        "broker": 1,
        "user": "alice",
        "client_id": "app",
        "api": "Produce",
        "bytes": nbytes,
        **extra,
    }


CONFIG = {
    "type": "quota_config",
    "v": 1,
    "ts": T0,
    "entity": {"user": "alice"},
    "quotas": {"producer_byte_rate": 1000, "controller_mutation_rate": 1},
}

LINES = [
    line(CONFIG),  # 1
    line(request(T0, 500)),  # 2
    "",  # 3 (blank: no output)
    line(request(T0 + 10, 20000)),  # 4 throttled
    "{not json",  # 5 bad line
    line(
        {
            "type": "batch",
            "v": 1,
            "broker": 2,
            "events": [  # 6 batch, one bad inner
                request(T0 + 20, 100) | {"broker": 1},
                {
                    "type": "request",
                    "v": 1,
                    "ts": T0 + 20,
                    "user": "alice",
                    "client_id": "app",
                    "api": "Produce",
                    "bytes": -1,
                },
                {
                    "type": "connection",
                    "v": 1,
                    "ts": T0 + 20,
                    "listener": "EXTERNAL",
                    "ip": "10.0.0.1",
                },
            ],
        }
    ),
    "   ",  # 7 (blank)
    line(request(T0 + 30, 1) | {"v": 2}),  # 8 bad version
    line(
        {
            "type": "mutation",
            "v": 1,
            "ts": T0 + 40,
            "broker": 1,
            "user": "alice",
            "client_id": "app",
            "api": "CreateTopics",
            "api_version": 7,
            "partitions": 30,
        }
    ),  # 9
    line(request(T0 + 10**12, 1)),  # 10 ts absurdly far away
]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return {
        "input": src,
        "decisions": tmp_path / "decisions.jsonl",
        "directives": tmp_path / "directives.jsonl",
        "deadletter": tmp_path / "dead.jsonl",
    }


def run(files: dict[str, Path], *extra: str) -> int:
    return main(
        [
            "replay",
            str(files["input"]),
            "--decisions-out",
            str(files["decisions"]),
            "--directives-out",
            str(files["directives"]),
            "--deadletter-out",
            str(files["deadletter"]),
            *extra,
        ]
    )


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_decisions_one_line_per_non_blank_input_line(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(files) == 0
    out = read(files["decisions"])
    non_blank = [i for i, x in enumerate(LINES) if x.strip()]
    assert [o["index"] for o in out] == non_blank  # in order, indexed by input line (0-based)
    by_line = {o["index"] + 1: o for o in out}

    config = by_line[1]
    assert config == {"index": 0, "throttle_time_ms": 0, "decisions": []}

    ok = by_line[2]
    assert set(ok) == {"index", "throttle_time_ms", "decisions"}
    [d] = ok["decisions"]
    assert set(d) == {
        "quota",
        "entity",
        "throttle_time_ms",
        "action",
        "observed",
        "limit",
        "window_ms",
        "config_level",
    }
    assert d["quota"] == "producer_byte_rate" and d["action"] == "none" and d["limit"] == 1000

    throttled = by_line[4]
    assert throttled["throttle_time_ms"] == throttled["decisions"][0]["throttle_time_ms"] > 0

    bad = by_line[5]
    assert (
        bad["throttle_time_ms"] == 0
        and bad["decisions"] == []
        and bad["error"].startswith("not JSON")
    )

    batch = by_line[6]
    assert set(batch) == {"index", "throttle_time_ms", "events"}
    assert len(batch["events"]) == 3
    good, inner_bad, conn = batch["events"]
    assert good["decisions"] and "error" not in good
    assert inner_bad["decisions"] == [] and "bytes" in inner_bad["error"]
    assert conn["decisions"][0]["entity"] == {"broker": 2}  # the batch's broker is the default
    assert batch["throttle_time_ms"] == max(e["throttle_time_ms"] for e in batch["events"])

    assert "v=2" in by_line[8]["error"]
    assert by_line[9]["decisions"][0]["action"] == "none"  # strict, admitted into debt
    assert "stream time" in by_line[10]["error"]

    err = capsys.readouterr().err
    for n in (5, 6, 8, 10):
        assert f"line {n}: " in err
    assert "replayed 8 lines" in err and "4 bad" in err


def test_directives_out(files: dict[str, Path]) -> None:
    assert run(files, "--quiet") == 0
    directives = read(files["directives"])
    assert directives, "the 20000-byte produce must publish a directive"
    for x in directives:
        assert x["v"] == 1 and x["until"] == x["ts"] + x["throttle_time_ms"] > x["ts"]
    assert directives[0]["entity"] == {"user": "alice", "client_id": ""}
    assert directives[0]["config_level"] == "/config/users/alice"


@pytest.mark.parametrize("suffix, compress", [(".gz", gzip.compress), (".bz2", bz2.compress)])
def test_a_compressed_input_replays_as_the_plain_file(
        files: dict[str, Path], suffix: str, compress: Callable[[bytes], bytes]) -> None:
    """The opener `explain` reads archives with (`app.intake.files`)."""
    assert run(files, "--quiet") == 0
    plain = read(files["decisions"]), read(files["directives"])
    packed = files["input"].with_name("events.jsonl" + suffix)
    packed.write_bytes(compress(files["input"].read_bytes()))
    assert run({**files, "input": packed}, "--quiet") == 0
    assert (read(files["decisions"]), read(files["directives"])) == plain


def test_bad_lines_are_dead_lettered_with_line_numbers(files: dict[str, Path]) -> None:
    assert run(files, "--quiet") == 0
    dead = read(files["deadletter"])
    assert [d["source"] for d in dead] == [f"{files['input']}:{n}" for n in (5, 6, 8, 10)]
    assert all(d["v"] == 1 and d["reason"] for d in dead)
    assert dead[0]["value"] == "{not json"  # undecodable bytes kept as text
    assert dead[1]["value"]["bytes"] == -1  # only the bad inner event of the batch
    assert dead[2]["value"]["v"] == 2


def test_strict_exits_1_when_a_line_was_bad(files: dict[str, Path]) -> None:
    assert run(files, "--quiet", "--strict") == 1
    assert len(read(files["decisions"])) == sum(1 for x in LINES if x.strip())  # still all written


def test_strict_exits_0_on_clean_input(tmp_path: Path) -> None:
    src = tmp_path / "clean.jsonl"
    src.write_text(line(CONFIG) + "\n" + line(request(T0, 1)) + "\n", encoding="utf-8")
    dead = tmp_path / "dead.jsonl"
    assert main(["replay", str(src), "--quiet", "--strict", "--deadletter-out", str(dead)]) == 0
    assert not dead.exists()  # created only when there is a bad line


def test_window_options_reach_the_engine(files: dict[str, Path]) -> None:
    assert run(files, "--quiet", "--window-num", "2") == 0
    d = read(files["decisions"])[1]["decisions"][0]
    assert d["window_ms"] == 1000 and d["observed"] == 500.0


def test_missing_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.jsonl"
    assert main(["replay", str(missing), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert str(missing) in err and "Traceback" not in err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--help"])
    assert exc.value.code == 0
    assert "--decisions-out" in capsys.readouterr().out


# ------------------------------------------------------------ the engine's settings as flags


def replay_engine(argv: list[str], env: dict[str, str]) -> Any:
    from app.cli import build_parser
    from app.commands.support import engine_settings

    return engine_settings(build_parser().parse_args(["replay", *argv]), env)


def test_an_engine_flag_not_given_is_the_workers_setting() -> None:
    """With the workers' environment, replay decides as they do; a flag given wins."""
    env = {"QS_QUOTA_WINDOW_SIZE_MS": "500", "QS_SCOPE": "cluster",
           "QS_CLUSTER_ENFORCEMENT": "allocations", "QS_ALLOCATION_SAMPLE_MS": "50"}
    settings = replay_engine([], env)
    assert (settings.window_ms, settings.scope, settings.allocations,
            settings.allocation_sample_ms) == (500, "cluster", True, 50)
    assert replay_engine(["--window-ms", "200"], env).window_ms == 200
    assert not replay_engine(["--no-allocations"], env).allocations
    assert not replay_engine(["--scope", "broker"], env).allocations  # allocations: cluster only
    defaults = replay_engine([], {})
    assert (defaults.window_ms, defaults.scope, defaults.allocations) == (1000, "broker", False)


def test_a_bad_engine_setting_is_one_line_naming_it(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("")
    monkeypatch.setenv("QS_QUOTA_WINDOW_NUM", "0")
    assert main(["replay", str(source), "--quiet"]) == 2
    assert "QS_QUOTA_WINDOW_NUM" in capsys.readouterr().err
    monkeypatch.delenv("QS_QUOTA_WINDOW_NUM")
    for bad, why in (("0", "must be an integer >= 1"), ("x", "must be an integer")):
        with pytest.raises(SystemExit) as refused:
            main(["replay", str(source), "--window-num", bad])
        assert refused.value.code == 2
        assert f"argument --window-num: {why}" in capsys.readouterr().err
