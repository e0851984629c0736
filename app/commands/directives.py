"""`quota-streams directives`: print the control topic as JSON lines, like a console consumer."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

import orjson

from app.commands.support import int_at_least, positive_float

if TYPE_CHECKING:
    from app.kafka.security import KafkaSecurity


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "directives", help="print the directives on the control topic as JSON lines",
        description="Print the records of the control topic (QS_TOPIC_DIRECTIVES) as JSON lines, "
        "one per directive, from all partitions, without a consumer group (nothing is "
        "committed). Starts at the end of the topic unless --from-beginning. Runs until Ctrl-C, "
        "--max-messages or --idle-timeout.",
        epilog="Reads KAFKA_BOOTSTRAP_SERVERS and QS_TOPIC_DIRECTIVES (see docs/admin.md).")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the oldest record instead of the end")
    p.add_argument("--idle-timeout", type=positive_float, metavar="SECONDS",
                   help="exit when no record arrived for this long")
    p.add_argument("--max-messages", type=int_at_least(1), metavar="N", help="exit after N records")
    p.add_argument("--show-meta", action="store_true",
                   help="print {partition, offset, timestamp, key, value} objects instead of the values")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.admin.common import run_kafka, settings_with_bootstrap

    settings, bootstrap = settings_with_bootstrap()
    topic = settings.topic_directives
    try:
        return run_kafka(bootstrap, _consume(bootstrap, settings.kafka_security(), topic, args,
                                             sys.stdout))
    except BrokenPipeError:  # `| head`: the reader left; not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def format_record(record: Any, show_meta: bool) -> str | None:
    """One output line for a consumer record, or None (with a note on stderr) if not JSON."""
    try:
        value = orjson.loads(record.value) if record.value is not None else None
    except orjson.JSONDecodeError:
        text = record.value.decode("utf-8", "replace")[:80]
        print(f"partition {record.partition} offset {record.offset}: not JSON, skipped: {text!r}",
              file=sys.stderr)
        return None
    if not show_meta:
        return orjson.dumps(value).decode()
    key = record.key.decode("utf-8", "replace") if record.key is not None else None
    return orjson.dumps({"partition": record.partition, "offset": record.offset,
                         "timestamp": record.timestamp, "key": key, "value": value}).decode()


async def _consume(bootstrap: str, security: KafkaSecurity, topic: str, args: argparse.Namespace,
                   out: IO[str]) -> int:
    from app.kafka.clients import consumer, partitions_of

    async with consumer(bootstrap, security=security) as c:
        tps = await partitions_of(c, topic)
        c.assign(tps)
        if args.from_beginning:
            await c.seek_to_beginning(*tps)
        else:
            await c.seek_to_end(*tps)
        if sys.stderr.isatty():
            where = "the beginning" if args.from_beginning else "the end"
            print(f"reading {topic} ({len(tps)} partitions) from {where}; Ctrl-C to stop",
                  file=sys.stderr)
        count = 0
        last = time.monotonic()
        while True:
            batches = await c.getmany(timeout_ms=200)
            if batches:
                last = time.monotonic()
            for _tp, records in sorted(batches.items()):
                for record in records:
                    line = format_record(record, args.show_meta)
                    if line is None:
                        continue
                    out.write(line + "\n")
                    count += 1
                    if args.max_messages is not None and count >= args.max_messages:
                        out.flush()
                        return 0
            out.flush()
            if args.idle_timeout is not None and time.monotonic() - last >= args.idle_timeout:
                return 0
