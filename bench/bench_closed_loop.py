"""The distributions behind the closed-loop tests' bounds: each module run several times.

Runs the given test modules `--runs` times each, one after another, with `--busy` processes
spinning (one by default: a 2-core box with one core taken, as CI's neighbours may), and prints
each figure the tests record (`tests/integration/measured.py`) as min / median / max beside its
bound, with how many runs fell outside it. Run:

    python bench/bench_closed_loop.py tests/integration/test_gateway_allocations.py --runs 5
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]


def spin() -> None:
    while True:
        pass


def run_module(module: str, out: Path) -> tuple[bool, float]:
    """One pytest run of `module` keeping its measurements in `out`: (passed, seconds)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           module], cwd=ROOT, env={**os.environ, "QS_TEST_MEASUREMENTS": str(out)},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], file=sys.stderr)
    return proc.returncode == 0, time.monotonic() - started


def table(lines: list[dict], runs: int) -> list[str]:
    """One row per (test, figure): its bound, min / median / max and the runs outside it."""
    figures: dict[tuple[str, str], list[float]] = defaultdict(list)
    bounds: dict[tuple[str, str], list[float]] = {}
    for line in lines:
        key = (line["test"].split("::")[-1], line["name"])
        figures[key].append(float(line["value"]))
        bounds[key] = line["bound"]
    rows = [f"{'test':<62} {'figure':<24} {'bound':>13} {'n':>3} {'min':>7} {'median':>7} "
            f"{'max':>7} {'out':>4}"]
    for (test, name), values in sorted(figures.items()):
        lo, hi = bounds[(test, name)]
        out = sum(not lo <= v <= hi for v in values)
        rows.append(f"{test[:62]:<62} {name[:24]:<24} {f'{lo:g}-{hi:g}':>13} {len(values):>3} "
                    f"{min(values):>7.3f} {statistics.median(values):>7.3f} "
                    f"{max(values):>7.3f} {out:>4}")
    rows.append(f"({runs} run(s) per module; n: the figure's readings, several per run when a "
                "test checks it per client)")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", help="test modules (paths under tests/)")
    parser.add_argument("--runs", type=int, default=5, help="runs per module (default 5)")
    parser.add_argument("--busy", type=int, default=1,
                        help="processes spinning meanwhile (default 1: one of two cores taken)")
    args = parser.parse_args()
    missing = [m for m in args.modules if not (ROOT / m.split("::")[0]).is_file()]
    if missing:
        print(f"no such test module: {', '.join(missing)}", file=sys.stderr)
        return 2
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    lines: list[dict] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "measurements.jsonl"
            for module in args.modules:
                for i in range(1, args.runs + 1):
                    passed, seconds = run_module(module, out)
                    print(f"{module} run {i}/{args.runs}: {'passed' if passed else 'FAILED'} "
                          f"in {seconds:.0f} s", flush=True)
            if out.exists():
                lines = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    finally:
        for s in spinners:
            s.terminate()
    print(f"\nbusy processes: {args.busy}; {os.cpu_count()} cores")
    print("\n".join(table(lines, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
