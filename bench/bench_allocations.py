"""Cluster-scope enforcement side by side: `directives` against `allocations`, per phase.

Runs a scenario with phases (default `scenarios/cluster-allocations.yaml`) in the offline
simulator under both enforcements and several loop latencies, and prints, per phase, the mean
and p95 of the limited entity's per-second cluster-wide rate (x its limit), the seconds until
that rate settled (`app.sim.meter.SETTLE_BAND` of the limit for `SETTLE_RUN` seconds), and what
each well-behaved client got of what it offered. The same figures as `simulate`'s summary;
deterministic, a few seconds per run. JSON beside the table with --json.

    python bench/bench_allocations.py
    python bench/bench_allocations.py scenarios/cluster-produce.yaml --phase steady:20:90
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.sim.meter import SETTLE_BAND, SETTLE_RUN  # noqa: E402
from app.sim.offline import run_offline  # noqa: E402
from app.sim.report import fmt_ratio, phase_dicts, table  # noqa: E402
from app.sim.scenario import Phase, ScenarioError, load_scenario  # noqa: E402


def phase_arg(raw: str) -> Phase:
    try:
        name, start, end = raw.split(":")
        return Phase(name, float(start), float(end))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not name:start:end (seconds)") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", nargs="?", default=str(ROOT / "scenarios" / "cluster-allocations.yaml"),
                   help="a cluster-scope scenario (default %(default)s)")
    p.add_argument("--latency-ms", type=int, nargs="+", default=[50, 150, 500],
                   help="loop latencies to run each enforcement at (default %(default)s)")
    p.add_argument("--phase", type=phase_arg, action="append",
                   help="name:start:end in seconds, instead of the scenario's phases")
    p.add_argument("--json", type=Path, help="also write the figures here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        base = load_scenario(args.scenario)
        if args.phase:
            base = dataclasses.replace(base, phases=tuple(args.phase))
        if not base.phases:
            raise ScenarioError(f"{args.scenario}: no phases (give --phase name:start:end)")
        runs = {e: base.with_enforcement(e) for e in ("directives", "allocations")}
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows, figures = [], []
    for latency in args.latency_ms:
        for enforcement, scenario in runs.items():
            print(f"running {scenario.name} with {enforcement}, {latency} ms loop latency ...",
                  file=sys.stderr)
            world = run_offline(scenario, latency_ms=latency).world
            for phase in phase_dicts(world, scenario.phases):
                figures.append({"enforcement": enforcement, "latency_ms": latency, **phase})
                clients = ", ".join(f"{name} {c['got'] / c['offered']:.2f}x"
                                    for name, c in phase["clients"].items() if c["got"])
                for e in phase["entities"]:
                    settled = "never" if e["settled_s"] is None else f"{e['settled_s']} s"
                    rows.append([str(latency), enforcement, phase["name"], e["entity"],
                                 fmt_ratio(e["mean_ratio"]), fmt_ratio(e["p95_ratio"]), settled,
                                 clients or "-"])
    print(table(["LATENCY MS", "ENFORCEMENT", "PHASE", "ENTITY", "MEAN/s xLIMIT", "P95/s xLIMIT",
                 "SETTLED IN", "WELL-BEHAVED GOT xOFFERED"], rows, colour=False))
    print(f"(per-second cluster-wide rates; settled: within {SETTLE_BAND:.0%} of the limit for "
          f"{SETTLE_RUN} s in a row, from the phase's start)")
    if args.json:
        args.json.write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
