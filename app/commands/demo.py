"""`quota-streams demo`: the whole product on this machine, real clients through gateways, with a
live view of what it does."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEMO_FILE = Path("scenarios") / "demo.yaml"
#: the clients' own topics take megabytes a second: a bounded size each, so a demo left
#: running for hours keeps the disk it started with
CLIENT_TOPIC_CONFIG = {"retention.bytes": str(256 << 20), "segment.bytes": str(32 << 20)}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="start a broker, workers, gateways and real clients, and watch quotas being enforced",
        description="Start a local Apache Kafka (unless KAFKA_BOOTSTRAP_SERVERS is set), the "
        "topics, the example quotas, worker(s) and gateways in front of the broker, then run "
        "the real client processes of scenarios/demo.yaml through the gateways: confluent-kafka, "
        "kafka-python and aiokafka producers and consumers, a connection storm and topic storms, "
        "some over their quotas. A live view, refreshed every second, shows each quota entity's "
        "rate against its limit over the quota window, each client, and the directives in "
        "force. Ctrl-C stops everything the demo started. (`quota-streams simulate` runs the "
        "simulated cluster, for large scenarios.)",
    )
    p.add_argument("--duration", type=float, metavar="S", help="stop by itself after S seconds")
    p.add_argument("--workers", type=int, metavar="N", help="workers to start (default: 1 on the "
                   "local Kafka, 0 with KAFKA_BOOTSTRAP_SERVERS)")
    p.add_argument("--scenario", metavar="FILE", help=f"another demo file (default: {DEMO_FILE})")
    p.add_argument("--no-color", action="store_true", help="no colour even on a terminal")
    p.set_defaults(run=run)


def find_scenario(given: str | None) -> Path:
    """The given file, else scenarios/demo.yaml here or next to the installed package."""
    if given:
        return Path(given)
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        if (base / DEMO_FILE).is_file():
            return base / DEMO_FILE
    from app.errors import UserError

    raise UserError(f"{DEMO_FILE} not found: run the demo from the project directory, "
                    "or give --scenario FILE")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from app.demo.lag import LagProbe
    from app.demo.run import run_demo
    from app.demo.spec import load_demo
    from app.demo.view import DemoView
    from app.devstack.procstat import CpuMeter
    from app.errors import UserError
    from app.kafka.topics import create_topics_sync
    from app.sim.scenario import ScenarioError
    from app.sim.session import start_pipeline, stderr_log, terminate_as_interrupt

    try:
        spec = load_demo(find_scenario(args.scenario))
    except ScenarioError as exc:
        raise UserError(str(exc)) from None
    if args.duration is not None and args.duration <= 0:
        raise UserError("--duration must be > 0")
    if args.workers is not None and args.workers < 0:
        raise UserError("--workers must be >= 0")
    _need_client_libraries()
    tty = sys.stdout.isatty()
    colour = tty and not args.no_color and not os.environ.get("NO_COLOR")
    terminate_as_interrupt()
    pipeline = start_pipeline(spec, args.workers, stderr_log)
    cluster = pipeline.cluster
    ok = False
    try:
        create_topics_sync(pipeline.bootstrap, [(t, n, CLIENT_TOPIC_CONFIG)
                                                for t, n in spec.topics.items()],
                           security=pipeline.security, check_partitions=False)
        stderr_log(f"starting {spec.gateways} gateway(s) in front of {pipeline.bootstrap}")
        try:
            gateways = [cluster.start_gateway().bootstrap for _ in range(spec.gateways)]
        except RuntimeError as exc:
            raise UserError(f"{exc} (logs in {cluster.work_dir})") from None
        console = (f"http://127.0.0.1:{cluster.ports[min(cluster.procs)]}/console"
                   if cluster.procs else None)
        view = DemoView(spec, pipeline.bootstrap, pipeline.workers, gateways, cluster.local,
                        tty=tty, colour=colour, console=console)
        stderr_log(f"demo running: {len(spec.clients)} clients through {', '.join(gateways)}"
                   + ("; Ctrl-C stops it" if args.duration is None else f" for {args.duration:g} s"))
        if console:
            stderr_log(f"console: {console}")
        probe = LagProbe([cluster.ports[i] for i in sorted(cluster.procs)]) \
            if cluster.procs else None
        cpu = CpuMeter({"workers": [p.pid for p in cluster.procs.values()],
                        "gateways": [g.proc.pid for g in cluster.gateways]}).sample
        run_ = asyncio.run(run_demo(spec, pipeline.bootstrap, pipeline.security,
                                    pipeline.settings.topic_directives, gateways,
                                    cluster.work_dir, view.refresh, args.duration, probe, cpu))
        if tty:
            print()
        print(view.summary(run_))
        ok = True
    finally:
        stderr_log("stopping the clients, gateways and workers"
                   + (" and the local Kafka cluster" if cluster.local else ""))
        pipeline.stop(keep_logs=not ok)
        if not ok:
            stderr_log(f"logs: {cluster.work_dir}")
    return 0


def _need_client_libraries() -> None:
    """The demo's clients are confluent-kafka, kafka-python and aiokafka programs."""
    from app.errors import UserError

    for module, package in (("confluent_kafka", "confluent-kafka"), ("kafka", "kafka-python")):
        try:
            __import__(module)
        except ImportError:
            raise UserError(f"the demo's clients need {package}: pip install "
                            "'quota-streams[clients]' (make demo installs it)") from None
