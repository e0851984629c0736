"""`quota-streams replay`: run the engine over a contract JSON-lines file, offline."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from typing import IO, cast

import orjson

from app.commands.support import add_window_options, engine_settings, open_input, progress
from app.intake.deadletter import encode_deadletter
from app.intake.records import file_configs
from app.intake.replay import replay


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "replay",
        help="replay contract events offline through the quota engine",
        description="Read contract-v1 JSON lines (events, batches, quota_config records) in file "
        "order and write the decisions Kafka's quota managers would make and the directives the "
        "live pipeline would publish. Configs apply by their ts (an event is judged by the "
        "configs with ts <= its own, wherever they are in the file), as in the live workers; "
        "a config older than one of the same entity and quota keys before it is refused. "
        "Bad lines are reported, dead-lettered and skipped.",
    )
    p.add_argument("input", nargs="?", default="-",
                   help="input file, optionally .gz or .bz2 ('-' or omitted: stdin)")
    p.add_argument("--decisions-out", metavar="FILE", help="one JSON line of decisions per input line")
    p.add_argument("--directives-out", metavar="FILE", help="the directives, one JSON line each")
    p.add_argument("--deadletter-out", metavar="FILE", default="quota-deadletter.jsonl",
                   help="where bad lines go (created only if there is one; default %(default)s)")
    p.add_argument("--strict", action="store_true", help="exit 1 if any line was bad")
    p.add_argument("--quiet", action="store_true", help="no progress or summary on stderr")
    add_window_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = engine_settings(args)
    bad_lines = lines = directives = throttled = 0
    with contextlib.ExitStack() as stack:
        source = rewindable(open_input(args.input, stack), stack)
        configs = file_configs(line.strip() for line in source)
        source.seek(0)
        decisions_out = _open_out(args.decisions_out, stack)
        directives_out = _open_out(args.directives_out, stack)
        deadletter: IO[bytes] | None = None
        for result in replay(progress(source, args.quiet), settings, configs):
            lines += 1
            if decisions_out is not None:
                decisions_out.write(orjson.dumps(result.output) + b"\n")
            if directives_out is not None:
                for directive in result.directives:
                    directives_out.write(orjson.dumps(directive) + b"\n")
            directives += len(result.directives)
            throttled += result.output["throttle_time_ms"] > 0
            for reason, raw in result.bad:
                bad_lines += 1
                print(f"line {result.index + 1}: {reason}", file=sys.stderr)
                if deadletter is None:
                    deadletter = _open_out(args.deadletter_out, stack, "ab")
                    assert deadletter is not None  # the option has a default
                source_name = f"{args.input}:{result.index + 1}"
                deadletter.write(encode_deadletter(reason, raw, source_name) + b"\n")
    if not args.quiet:
        print(f"replayed {lines} lines: {throttled} throttled, {directives} directives, "
              f"{bad_lines} bad", file=sys.stderr)
    return 1 if args.strict and bad_lines else 0


def rewindable(source: IO[bytes], stack: contextlib.ExitStack) -> IO[bytes]:
    """The input, readable twice (configs first): stdin or a pipe is spooled to a temporary
    file (kept in memory up to 64 MiB)."""
    if source.seekable():
        return source
    spool = stack.enter_context(tempfile.SpooledTemporaryFile(max_size=64 << 20))
    shutil.copyfileobj(source, spool)
    spool.seek(0)
    return cast(IO[bytes], spool)


def _open_out(path: str | None, stack: contextlib.ExitStack, mode: str = "wb") -> IO[bytes] | None:
    """An output file (`-`: stdout); one that cannot be written is a user error, not a traceback."""
    from app.errors import UserError

    if path is None:
        return None
    if path == "-":
        return sys.stdout.buffer
    try:
        return stack.enter_context(open(path, mode))
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None

