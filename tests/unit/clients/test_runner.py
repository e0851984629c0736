"""The runner reads its clients without holding any of them up."""

from __future__ import annotations

from pathlib import Path

from app.clients.runner import run_clients


def test_a_client_that_logs_a_lot_is_not_held_up_by_the_ones_before_it(tmp_path: Path) -> None:
    """The first client runs for 3 s; the second logs 256 KiB then reports at once. Read
    through pipes in turn, the second blocked on its full pipe until the first ended."""
    out = run_clients([("slow", ["--seconds", "3"]), ("chatty", ["--log-kib", "256"])],
                      timeout=30, log_dir=tmp_path, module="tests.unit.clients.chatty_client")
    (slow,), (chatty,) = out["slow"], out["chatty"]
    assert chatty["done"] < slow["done"] - 1.5
    assert len((tmp_path / "chatty.log").read_bytes()) == 256 * 1024
