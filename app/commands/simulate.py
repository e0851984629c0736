"""`quota-streams simulate`: run a scenario's brokers and clients against the live pipeline."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from app.sim.scenario import ENFORCEMENTS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="run a scenario of simulated brokers and clients against the pipeline",
        description="Simulate brokers and clients (scenarios/*.yaml) in one process: the brokers "
        "send contract events to the event topics and obey the directives on the control topic, "
        "the clients react to throttles. Starts a local Kafka and one worker unless "
        "KAFKA_BOOTSTRAP_SERVERS is set (then no worker is started unless --workers N). Reports, "
        "per quota entity, the rate achieved against the quota: a table, a CSV (and Parquet) "
        "time series, a PNG plot and summary.json in --out.",
    )
    p.add_argument("scenario", help="scenario file (YAML), e.g. scenarios/cluster-produce.yaml")
    p.add_argument("--duration", type=float, metavar="S", help="run for S seconds (default: the scenario's)")
    p.add_argument("--warmup", type=float, metavar="S",
                   help="seconds left out of the steady-state figures (default: the scenario's)")
    p.add_argument("--out", metavar="DIR", help="where results go (default: sim-results/<scenario name>)")
    p.add_argument("--workers", type=int, metavar="N", help="workers to start (default: 1 on the "
                   "local Kafka, 0 with KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--offline", action="store_true", help="no Kafka: run against the quota engine "
                   "in-process, in simulated time, with a fixed loop latency (--latency-ms)")
    p.add_argument("--latency-ms", type=int, default=100, metavar="MS",
                   help="--offline: time from a flush to its directives reaching the brokers (default %(default)s)")
    p.add_argument("--enforcement", choices=ENFORCEMENTS,
                   help="cluster scope: how the cluster-wide quota is enforced (default: the "
                   "scenario's; docs/allocations.md; plugin: by brokers running the broker "
                   "plugin, docs/broker-plugin.md)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--no-color", action="store_true", help="no colour even on a terminal")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.errors import UserError
    from app.sim.scenario import ScenarioError, load_scenario

    try:
        scenario = load_scenario(args.scenario).with_run(args.duration, args.warmup)
        if args.enforcement:
            scenario = scenario.with_enforcement(args.enforcement)
    except ScenarioError as exc:
        raise UserError(str(exc)) from None
    if args.workers is not None and args.workers < 0:
        raise UserError("--workers must be >= 0")
    if scenario.duration is None and args.offline:
        raise UserError(f"{args.scenario} runs until stopped; give --duration for --offline")
    out = Path(args.out or Path("sim-results") / scenario.name)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write results to {out}: {exc.strerror}; give --out DIR") from None
    colour = sys.stdout.isatty() and not args.no_color and not os.environ.get("NO_COLOR")
    if args.offline:
        return _offline(args, scenario, out, colour)
    return _live(args, scenario, out, colour)


def _live(args: argparse.Namespace, scenario: Any, out: Path, colour: bool) -> int:
    import asyncio

    from app.errors import UserError
    from app.sim.live import LiveRun
    from app.sim.session import run_live, start_pipeline, stderr_log, terminate_as_interrupt
    from app.subscriber.watcher import DirectiveWatcher

    terminate_as_interrupt()
    log = (lambda m: None) if args.quiet else stderr_log
    show = not args.quiet
    tty = sys.stderr.isatty()
    pipeline = start_pipeline(scenario, args.workers, log, work_dir=out / "logs")
    try:
        if scenario.workers_stop is not None and not pipeline.workers:
            raise UserError(f"{args.scenario} stops the workers at {scenario.workers_stop:g} s, "
                            "but none are started here: give --workers N")
        until = "until Ctrl-C" if scenario.duration is None else f"for {scenario.duration:g} s"
        log(f"running {scenario.name} ({scenario.scope} scope, {len(scenario.brokers)} brokers, "
            f"{len(scenario.clients)} clients) {until}; warmup {scenario.warmup:g} s")

        def progress(run: LiveRun, watcher: DirectiveWatcher, now: float) -> None:
            elapsed = (now - run.start_ms) / 1000.0
            if not show or (not tty and int(elapsed) % 10):
                return
            line = _progress_line(run, watcher, elapsed)
            if tty:
                sys.stderr.write("\r\x1b[2K" + line)
                sys.stderr.flush()
            else:
                print(line, file=sys.stderr, flush=True)

        run, watcher = asyncio.run(run_live(scenario, pipeline, progress))
        if show and tty:
            sys.stderr.write("\r\x1b[2K")
        latency = {f"p{int(q * 100)}": watcher.latency_ms(q) for q in (0.5, 0.9, 0.99)}
        extra = {"mode": "live", "bootstrap": pipeline.bootstrap, "workers": pipeline.workers,
                 "events_sent": run.events_sent, "records_sent": run.records_sent,
                 "events_dropped": {why: n for why, n in run.drops.events.items() if n},
                 "directives_seen": watcher.total, "directives": dict(sorted(watcher.counts.items())),
                 "loop_latency_ms": latency,
                 "worker_logs": str(pipeline.cluster.work_dir)}
        assert run.world is not None
        _report(scenario, run.world, run.end_ms, out, colour, extra)
    finally:
        pipeline.stop()
    return 0


def _offline(args: argparse.Namespace, scenario: Any, out: Path, colour: bool) -> int:
    from app.settings import load
    from app.sim.offline import run_offline
    from app.sim.session import cluster_env

    settings = load({**os.environ, **cluster_env(scenario)}).engine()  # as the workers' would be
    started = time.monotonic()
    result = run_offline(scenario, latency_ms=args.latency_ms, settings=settings)
    extra = {"mode": "offline", "latency_ms": args.latency_ms, "events": result.events,
             "directives": sum(1 for d in result.directives if d.get("kind") != "allocation"),
             "allocations": sum(1 for d in result.directives if d.get("kind") == "allocation"),
             "wall_s": round(time.monotonic() - started, 3)}
    _report(scenario, result.world, result.end_ms, out, colour, extra)
    return 0


def _progress_line(run: Any, watcher: Any, elapsed: float) -> str:
    from app.sim.report import fmt_amount

    total = "" if run.scenario.duration is None else f"/{run.scenario.duration:.0f}"
    parts = [f"{elapsed:4.0f}{total} s", f"{run.events_sent} events", f"{watcher.total} directives"]
    world = run.world
    recent = world.meter.recent(run.start_ms + elapsed * 1000.0, seconds=3)
    limited = [(k, r) for k, r in world.meter.rows.items() if r.limit]
    for (quota, entity), row in limited[:3]:
        parts.append(f"{entity} {fmt_amount(recent.get((quota, entity), 0.0), row.unit)}"
                     f"/{fmt_amount(row.limit, row.unit)}")
    return "  ".join(parts)


def _report(scenario: Any, world: Any, end_ms: float, out: Path, colour: bool,
            extra: dict[str, Any]) -> None:
    from app.sim import report

    summaries = world.meter.summaries(scenario.warmup, end_ms)
    rows = list(world.meter.series(end_ms))
    files = [out / "timeseries.csv"]
    report.write_csv(files[0], rows)
    if report.write_parquet(out / "timeseries.parquet", rows):
        files.append(out / "timeseries.parquet")
    title = f"{scenario.name}: {scenario.scope} scope, {len(scenario.brokers)} brokers"
    phases = report.phase_rows(world, scenario.phases)
    if report.plot(out / "rates.png", rows, summaries, title, scenario.scope, scenario.warmup,
                   phases):
        files.append(out / "rates.png")
    seconds = summaries[0].seconds if summaries else 0
    report.write_json(out / "summary.json", {
        "scenario": scenario.name, "source": scenario.source, "scope": scenario.scope,
        "brokers": list(scenario.brokers), "duration_s": (end_ms - world.start_ms) / 1000.0,
        "warmup_s": scenario.warmup, "steady_state_s": seconds, **extra,
        "entities": [report.summary_dict(s, scenario.scope) for s in summaries],
        "clients": report.client_dicts(world),
        "phases": report.phase_dicts(world, scenario.phases),
    })
    files.append(out / "summary.json")
    print(f"{scenario.name}: {scenario.scope} scope, steady state over {seconds} s "
          f"(after {scenario.warmup:g} s warmup)")
    print(report.entity_table(summaries, scenario.scope, colour))
    print()
    print(report.client_table(world, colour))
    if scenario.phases:
        print()
        print(report.phase_table(world, scenario.phases, colour))
    latency = extra.get("loop_latency_ms")
    if latency and latency.get("p50") is not None:
        print(f"\nloop latency (broker sample -> directive on the control topic): "
              f"median {latency['p50']:.0f} ms, p90 {latency['p90']:.0f} ms")
    print("\nwrote " + ", ".join(str(f) for f in files))
