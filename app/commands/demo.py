"""`quota-streams demo`: the whole product on this machine, with a live view of what it does."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEMO_SCENARIO = Path("scenarios") / "demo.yaml"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="start a broker, workers and simulated clients, and watch quotas being enforced",
        description="Start the embedded broker (unless KAFKA_BOOTSTRAP_SERVERS is set), the "
        "topics, the example quotas and worker(s), then run scenarios/demo.yaml: well-behaved "
        "and abusive clients on 3 simulated brokers. A live view, refreshed every second, shows "
        "each entity's rate against its limit, the active throttles and directives per second. "
        "Ctrl-C stops everything the demo started.",
    )
    p.add_argument("--duration", type=float, metavar="S", help="stop by itself after S seconds")
    p.add_argument("--workers", type=int, metavar="N", help="workers to start (default: 1 on the "
                   "embedded broker, 0 with KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--scenario", metavar="FILE", help=f"another scenario (default: {DEMO_SCENARIO})")
    p.add_argument("--no-color", action="store_true", help="no colour even on a terminal")
    p.set_defaults(run=run)


def find_scenario(given: str | None) -> Path:
    """The given file, else scenarios/demo.yaml here or next to the installed package."""
    if given:
        return Path(given)
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (base / DEMO_SCENARIO).is_file():
            return base / DEMO_SCENARIO
    from app.cli import UserError

    raise UserError(f"{DEMO_SCENARIO} not found: run the demo from the project directory, "
                    "or give --scenario FILE")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from app.cli import UserError
    from app.sim import report
    from app.sim.scenario import ScenarioError, load_scenario
    from app.sim.session import run_live, start_pipeline, stderr_log, terminate_as_interrupt
    from app.sim.view import LiveView

    try:
        scenario = load_scenario(find_scenario(args.scenario)).with_run(args.duration)
    except ScenarioError as exc:
        raise UserError(str(exc)) from None
    if args.workers is not None and args.workers < 0:
        raise UserError("--workers must be >= 0")
    tty = sys.stdout.isatty()
    colour = tty and not args.no_color and not os.environ.get("NO_COLOR")
    terminate_as_interrupt()
    pipeline = start_pipeline(scenario, args.workers, stderr_log)
    ok = False
    try:
        view = LiveView(scenario, pipeline.bootstrap, pipeline.workers, pipeline.cluster.embedded,
                        tty=tty, colour=colour)
        stderr_log("demo running" + ("; Ctrl-C stops it" if scenario.duration is None
                                     else f" for {scenario.duration:g} s"))
        run_, _ = asyncio.run(run_live(scenario, pipeline, view.refresh))
        assert run_.world is not None
        if tty:
            print()
        summaries = run_.world.meter.summaries(scenario.warmup, run_.end_ms)
        seconds = summaries[0].seconds if summaries else 0
        print(f"{scenario.name}: {scenario.scope} scope, {(run_.end_ms - run_.start_ms) / 1000:.0f} s"
              f" run, rates over the last {seconds} s (after {scenario.warmup:g} s warmup)")
        print(report.entity_table(summaries, scenario.scope, colour))
        print()
        print(report.client_table(run_.world, colour))
        ok = True
    finally:
        stderr_log("stopping the workers" + (" and the embedded broker" if pipeline.cluster.embedded else ""))
        pipeline.stop(keep_logs=not ok)
        if not ok:
            stderr_log(f"logs: {pipeline.cluster.work_dir}")
    return 0



