"""Pieces several commands share: window options, argparse number types (also those of the
client programs' command line, `python -m app.clients`), input files, progress on a terminal,
the product's topics."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
from typing import IO, Callable, Iterable, Iterator, TypeVar

from app.engine.allocation import MIN_VALIDITY_MS, SPAN_MS, WINDOW_MS

from app.engine.engine import EngineSettings
from app.errors import reason
from app.kafka.security import KafkaSecurity
from app.settings import Settings

T = TypeVar("T")


def add_window_options(p: argparse.ArgumentParser) -> None:
    """Scope and Kafka's window settings, defaulting to Kafka's defaults (11 x 1000 ms)."""
    g = p.add_argument_group("quota windows (Kafka's quota.window.* settings)")
    g.add_argument("--scope", choices=("broker", "cluster"), default="broker",
                   help="broker: per-broker windows exactly as Kafka; cluster: windows over the "
                   "sum of all brokers (default %(default)s)")
    g.add_argument("--accounting", choices=("kafka", "served"), default="kafka",
                   help="kafka: Kafka's take-backs, exact (default); served: count every "
                   "reported event, for enforcement through delayed directives")
    g.add_argument("--window-num", type=_positive, default=11, help="quota.window.num (default %(default)s)")
    g.add_argument("--window-ms", type=_positive, default=1000,
                   help="quota.window.size.seconds in ms (default %(default)s)")
    g.add_argument("--controller-window-num", type=_positive, default=11,
                   help="controller.quota.window.num (default %(default)s)")
    g.add_argument("--controller-window-ms", type=_positive, default=1000,
                   help="controller.quota.window.size.seconds in ms (default %(default)s)")
    g.add_argument("--min-extension-ms", type=int_at_least(0), default=None,
                   help="a directive extending an active one is published only if it moves "
                   "'until' later by more than this (default: window/10)")
    g.add_argument("--config-grace-ms", type=int_at_least(0), default=20,
                   help="QS_CONFIG_GRACE_MS of the workers: a config record that reached Kafka "
                   "more than half this after its ts is in force from its arrival (default "
                   "%(default)s)")
    g.add_argument("--allocations", action="store_true",
                   help="QS_CLUSTER_ENFORCEMENT=allocations of the workers (cluster scope): "
                   "client quotas are divided among brokers and published as allocations")
    g.add_argument("--allocation-validity-ms", type=int_at_least(MIN_VALIDITY_MS), default=5000,
                   help="QS_ALLOCATION_VALIDITY_MS of the workers (default %(default)s)")
    g.add_argument("--allocation-span-ms", type=_positive, default=SPAN_MS,
                   help="QS_ALLOCATION_SPAN_MS of the workers (default %(default)s)")
    g.add_argument("--enforcer-window-ms", type=_positive, default=WINDOW_MS,
                   help="QS_ENFORCER_WINDOW_MS of the workers (default %(default)s)")
    g.add_argument("--idle-expiry-ms", type=int_at_least(0), default=3_600_000,
                   help="QS_IDLE_EXPIRY_MS of the workers: a window idle longer than this starts "
                   "afresh, as Kafka expires an inactive quota sensor (default %(default)s; "
                   "0: never)")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= minimum, with a one-line message otherwise."""
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{raw!r} must be >= {minimum}")
        return value
    return parse


def positive_float(raw: str) -> float:
    """An argparse type: a number > 0."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{raw!r} must be > 0")
    return value


_positive = int_at_least(1)


def engine_settings(args: argparse.Namespace) -> EngineSettings:
    return EngineSettings(
        scope=args.scope, accounting=args.accounting, window_num=args.window_num, window_ms=args.window_ms,
        controller_window_num=args.controller_window_num,
        controller_window_ms=args.controller_window_ms, min_extension_ms=args.min_extension_ms,
        config_grace_ms=args.config_grace_ms, idle_expiry_ms=args.idle_expiry_ms,
        allocations=args.allocations and args.scope == "cluster",
        allocation_validity_ms=args.allocation_validity_ms,
        allocation_span_ms=args.allocation_span_ms,
        enforcer_window_ms=args.enforcer_window_ms,
    )


def open_input(path: str, stack: contextlib.ExitStack) -> IO[bytes]:
    """A file (`.gz`, `.bz2` decompressed) or stdin, as bytes (`app.intake.files`); a missing
    file is a user error, not a traceback."""
    from app.errors import UserError
    from app.intake.files import STDIN
    from app.intake.files import open_input as open_file

    try:
        source = open_file(path)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}") from None
    return source if path == STDIN else stack.enter_context(source)


def progress(items: Iterable[T], quiet: bool, every: float = 1.0, unit: str = "lines") -> Iterator[T]:
    """Pass items through, showing a count and rate on stderr when it is a terminal."""
    show = not quiet and sys.stderr.isatty() and not os.environ.get("CI")
    start = last = time.monotonic()
    count = 0
    for item in items:
        count += 1
        yield item
        if show:
            now = time.monotonic()
            if now - last >= every:
                last = now
                rate = count / (now - start)
                sys.stderr.write(f"\r\x1b[2K{count:,} {unit} ({rate:,.0f}/s)")
                sys.stderr.flush()
    if show and count:
        sys.stderr.write("\r\x1b[2K")


def ensure_product_topics(settings: Settings, security: KafkaSecurity,
                          bootstrap: str | None = None,
                          fix: str = "check KAFKA_BOOTSTRAP_SERVERS") -> None:
    """Create the product's topics if missing, connected with `security`; a broker that cannot
    be reached is one line, ending with `fix`. `bootstrap` defaults to KAFKA_BOOTSTRAP_SERVERS."""
    from app.kafka.topics import BrokerError, create_topics_sync
    from app.errors import UserError
    from app.pipeline.topology import topic_specs

    address = bootstrap or settings.kafka_bootstrap_servers
    # the client logs each failed connection itself; report it once, then restore its logging
    # for what runs next in this process
    loggers = [logging.getLogger(name) for name in ("aiokafka", "kafka")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        create_topics_sync(address, topic_specs(settings), security=security)
    except BrokerError as exc:
        raise UserError(str(exc)) from None
    except (OSError, TimeoutError) as exc:
        raise UserError(f"cannot reach Kafka at {address}: {reason(exc)}; {fix}") from None
    except Exception as exc:  # aiokafka raises its own KafkaConnectionError etc.
        if type(exc).__module__.startswith("aiokafka"):
            raise UserError(f"cannot reach Kafka at {address} ({type(exc).__name__}); {fix}") from None
        raise
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
