"""`quota-streams audit` refuses what it cannot do before it spends ~10 s starting Spark."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from app.cli import main


def test_an_unwritable_out_is_one_line_before_spark(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("{}\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["audit", "--input", str(src), "--out", str(blocker / "out")]) == 2
    err = capsys.readouterr().err
    assert "cannot write --out" in err and "starting Spark" not in err


def test_an_unreachable_cluster_is_one_line_before_spark(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["audit", "--input", "kafka", "--bootstrap", f"127.0.0.1:{port}",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cannot reach Kafka" in err and "starting Spark" not in err
    assert len(err.splitlines()) == 1
