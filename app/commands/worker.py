"""`quota-streams worker`: run one production worker of the Faust app."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys

from app.settings import load


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "worker",
        help="run a quota-streams worker (Faust) against KAFKA_BOOTSTRAP_SERVERS",
        description="Run one worker of the Faust app. Settings come from the environment "
        "(see the README's settings table). Start several to scale out: they split the "
        "partitions and take over each other's windows from the changelog.",
    )
    p.add_argument("--no-create-topics", action="store_true",
                   help="do not create missing topics at start (when an operator manages them)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.cli import UserError

    settings = load()
    if settings.embedded:
        raise UserError("KAFKA_BOOTSTRAP_SERVERS is not set: point it at your Kafka cluster, "
                        "or run `quota-streams demo` to use the embedded broker")
    if not args.no_create_topics:
        ensure_topics(settings)
    try:
        os.makedirs(str(settings.state_dir), exist_ok=True)
    except OSError as exc:
        raise UserError(f"QS_STATE_DIR={settings.state_dir}: cannot create it ({exc.strerror})") from None
    from app.pipeline.faust_app import app

    tune_gc()
    level = {"WARNING": "warn"}.get(str(settings.log_level), str(settings.log_level).lower())
    sys.argv = ["quota-streams", "worker", "-l", level,
                "--web-port", str(settings.web_port), "--web-bind", str(settings.web_host)]
    app.main()
    return 0


#: Allocations between young-generation collections (CPython's default is 700).
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Collect less often, and never again scan what exists at start (modules, Faust).

    A worker allocates short-lived rows and events by the hundred thousand per second while
    holding every window's state: with the default thresholds the collector scanned that
    state again and again and cost as much as the ingest's parsing.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def ensure_topics(settings: object) -> None:
    """Create the product's topics if missing; a broker that cannot be reached is one line."""
    from app.broker import BrokerError, create_topics_sync
    from app.cli import UserError
    from app.pipeline.topology import topic_specs

    # the client logs each failed connection itself; report it once, then restore its logging
    # for the worker that runs next in this process
    loggers = [logging.getLogger(name) for name in ("aiokafka", "kafka")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        create_topics_sync(str(settings.kafka_bootstrap_servers), topic_specs(settings))  # type: ignore[attr-defined, arg-type]
    except BrokerError as exc:
        raise UserError(str(exc)) from None
    except (OSError, TimeoutError) as exc:
        raise UserError(f"cannot reach Kafka at {settings.kafka_bootstrap_servers}: {exc or type(exc).__name__}; "  # type: ignore[attr-defined]
                        "check KAFKA_BOOTSTRAP_SERVERS") from None
    except Exception as exc:  # aiokafka raises its own KafkaConnectionError etc.
        if type(exc).__module__.startswith("aiokafka"):
            raise UserError(f"cannot reach Kafka at {settings.kafka_bootstrap_servers} "  # type: ignore[attr-defined]
                            f"({type(exc).__name__}); check KAFKA_BOOTSTRAP_SERVERS") from None
        raise
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
