"""Run client programs side by side and read what they report, for tests and benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

Lines = list[dict[str, Any]]


def run_clients(specs: list[tuple[str, list[str]]], timeout: float = 120.0,
                log_dir: Path | None = None) -> dict[str, Lines]:
    """Run `python -m app.clients --name NAME ARGV...` for every (name, argv) at once; each
    one's JSON lines by name. Raises `RuntimeError` with its stderr if one fails. With
    `log_dir`, each one's stderr (its library's log) is kept there as `NAME.log`."""
    procs = {name: subprocess.Popen(
        [sys.executable, "-m", "app.clients", "--name", name, *argv],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for name, argv in specs}
    out: dict[str, Lines] = {}
    failed = []
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        if log_dir is not None:
            (log_dir / f"{name}.log").write_bytes(stderr)
        if proc.returncode != 0:
            failed.append(f"{name}: {stderr.decode(errors='replace')[-2000:]}")
        out[name] = [json.loads(line) for line in stdout.decode().splitlines()
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
