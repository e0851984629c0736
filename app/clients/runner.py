"""Run client programs side by side and read what they report, for tests and benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

Lines = list[dict[str, Any]]


def run_clients(specs: list[tuple[str, list[str]]], timeout: float = 120.0,
                log_dir: Path | None = None, module: str = "app.clients") -> dict[str, Lines]:
    """Run `python -m MODULE --name NAME ARGV...` for every (name, argv) at once; each
    one's JSON lines by name. Raises `RuntimeError` with its stderr if one fails. With
    `log_dir`, each one's stderr (its library's log) is kept there as `NAME.log`.

    Each client writes to files, not pipes: a pipe read only once the clients before it ended
    fills at 64 KiB, and a client whose library logs that much would block on its next write,
    its traffic stopped while the others run."""
    with tempfile.TemporaryDirectory(prefix="clients-") as tmp:
        files = {name: (Path(tmp) / f"{name}.out", Path(tmp) / f"{name}.err")
                 for name, _ in specs}
        procs = {}
        for name, argv in specs:
            out_path, err_path = files[name]
            with open(out_path, "wb") as stdout, open(err_path, "wb") as stderr:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", module, "--name", name, *argv],
                    cwd=ROOT, stdout=stdout, stderr=stderr)
        deadline = time.monotonic() + timeout
        for proc in procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        out: dict[str, Lines] = {}
        failed = []
        for name, proc in procs.items():
            out_path, err_path = files[name]
            stderr_bytes = err_path.read_bytes()
            if log_dir is not None:
                (log_dir / f"{name}.log").write_bytes(stderr_bytes)
            if proc.returncode != 0:
                failed.append(f"{name}: {stderr_bytes.decode(errors='replace')[-2000:]}")
            out[name] = [json.loads(line) for line in out_path.read_text().splitlines()
                         if line.startswith("{")]
    if failed:
        raise RuntimeError("; ".join(failed))
    return out


def per_second(lines: Lines, counter: str = "bytes") -> dict[int, float]:
    """`counter` in each reported second."""
    return {line["t"]: float(line.get(counter, 0)) for line in lines if "t" in line}


def summed(outputs: list[Lines], first: int, last: int, counter: str = "bytes") -> list[float]:
    """`counter` summed over clients, in each second of [first, last)."""
    seconds = [per_second(lines, counter) for lines in outputs]
    return [sum(s.get(t, 0.0) for s in seconds) for t in range(first, last)]
