"""Pieces several commands share: window options, argparse number types (also those of the
client programs' command line, `python -m app.clients`), input files, progress on a terminal,
the product's topics."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
import time
from typing import IO, Callable, Iterable, Iterator, Mapping, TypeVar

from app.engine.engine import EngineSettings
from app.errors import reason
from app.kafka.security import KafkaSecurity
from app.settings import SETTINGS, Setting, Settings, load

T = TypeVar("T")


#: replay's, audit's and explain's engine flags: (flag, the workers' setting it stands for, the
#: `EngineSettings` field). A flag not given is the setting's value in the environment (the
#: workers' ConfigMap in a deployment), else its default, parsed as the workers parse it.
ENGINE_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--scope", "QS_SCOPE", "scope"),
    ("--accounting", "QS_ACCOUNTING", "accounting"),
    ("--window-num", "QS_QUOTA_WINDOW_NUM", "window_num"),
    ("--window-ms", "QS_QUOTA_WINDOW_SIZE_MS", "window_ms"),
    ("--controller-window-num", "QS_CONTROLLER_WINDOW_NUM", "controller_window_num"),
    ("--controller-window-ms", "QS_CONTROLLER_WINDOW_SIZE_MS", "controller_window_ms"),
    ("--config-grace-ms", "QS_CONFIG_GRACE_MS", "config_grace_ms"),
    ("--idle-expiry-ms", "QS_IDLE_EXPIRY_MS", "idle_expiry_ms"),
    ("--allocation-validity-ms", "QS_ALLOCATION_VALIDITY_MS", "allocation_validity_ms"),
    ("--allocation-sample-ms", "QS_ALLOCATION_SAMPLE_MS", "allocation_sample_ms"),
    ("--allocation-span-ms", "QS_ALLOCATION_SPAN_MS", "allocation_span_ms"),
    ("--enforcer-window-ms", "QS_ENFORCER_WINDOW_MS", "enforcer_window_ms"),
)


METAVARS = {"--scope": "broker|cluster", "--accounting": "kafka|served"}


def _flag_type(setting: Setting) -> Callable[[str], object]:
    """The setting's parser, its refusal in argparse's words."""
    def parse(raw: str) -> object:
        try:
            return setting.read(raw.strip())
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc) or f"not a valid {setting.env}") from None
    return parse


def add_window_options(p: argparse.ArgumentParser) -> None:
    """The engine's settings as flags, each defaulting to the workers' setting (`ENGINE_FLAGS`),
    so a replay, an audit or an explanation run with the workers' environment decides as they
    did; flags given override it."""
    g = p.add_argument_group("the engine's settings (default: the workers' QS_* setting)")
    by_env = {s.env: s for s in SETTINGS}
    for flag, env, _ in ENGINE_FLAGS:
        setting = by_env[env]
        g.add_argument(flag, type=_flag_type(setting), default=None, metavar=METAVARS.get(
                           flag, "MS" if flag.endswith("-ms") else "N"),
                       help=f"{setting.help} (default: ${env}, else "
                       f"{setting.default})".replace("%", "%%"))
    g.add_argument("--allocations", action=argparse.BooleanOptionalAction, default=None,
                   help="cluster scope: divide client quotas among the enforcers and publish "
                   "allocations (default: $QS_CLUSTER_ENFORCEMENT is allocations)")
    g.add_argument("--min-extension-ms", type=int_at_least(0), default=None,
                   help="a directive extending an active one is published only if it moves "
                   "'until' later by more than this (default: window/10)")


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


def engine_settings(args: argparse.Namespace,
                    environ: Mapping[str, str] | None = None) -> EngineSettings:
    """The workers' engine settings from `environ` (default: this process's), each flag given
    in its place; a bad setting is a `SettingsError` naming it."""
    settings = load(environ)
    values = {field: getattr(args, flag[2:].replace("-", "_")) for flag, _, field in ENGINE_FLAGS}
    given = {field: value for field, value in values.items() if value is not None}
    allocations = (settings.cluster_enforcement == "allocations" if args.allocations is None
                   else args.allocations)
    scope = given.get("scope", settings.scope)
    return dataclasses.replace(settings.engine(), **given, min_extension_ms=args.min_extension_ms,
                               allocations=allocations and scope == "cluster")


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
