"""`quota-streams produce`: send a contract JSON-lines file to the product's topics."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections import Counter
from typing import TYPE_CHECKING

from app.commands.support import int_at_least, open_input, progress

if TYPE_CHECKING:
    from app.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "produce", help="send contract JSON lines (events, batches, quota configs) to Kafka",
        description="Send contract-v1 JSON lines to the topics the workers read: request, "
        "connection and mutation events (and batches of them) keyed by user+client_id or ip, "
        "quota_config records to the config topic with the compaction-safe key. The configs are "
        "sent first and acknowledged before any event, so each is in force for the events by "
        "its ts wherever it is in the file, as in `replay` (configs are on event time; "
        "docs/admin.md). Lines are validated as the workers validate them: a bad line, or a bad "
        "event of a batch, is reported with its line number and skipped, the rest sent; a "
        "record Kafka refuses (too large) is reported and the rest still sent (exit 1). Prints "
        "the number of records sent per topic.",
        epilog="Reads KAFKA_BOOTSTRAP_SERVERS and the QS_TOPIC_* names (see docs/admin.md).")
    p.add_argument("input", metavar="FILE",
                   help="JSON-lines file, optionally .gz or .bz2, or '-' for stdin")
    p.add_argument("--partition", type=int_at_least(0), metavar="N",
                   help="send every event record to partition N of its topic (a defined order for "
                   "tests); config records always go to their entity's partition")
    p.add_argument("--strict", action="store_true",
                   help="if any line (or event of a batch) is bad, send nothing and exit 1")
    p.add_argument("--no-create-topics", action="store_true",
                   help="do not create missing topics (when an operator manages them)")
    p.add_argument("--format", choices=("json", "columnar"), default="json",
                   help="how request records are written: as read (json) or as columnar batches "
                   "of the same events (docs/contract.md); other records stay JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.admin.common import run_kafka, settings_with_bootstrap
    from app.admin.routing import BadLine, Outgoing, route_line

    settings, bootstrap = settings_with_bootstrap()
    topics = {"request": settings.topic_request, "connection": settings.topic_connection,
              "mutation": settings.topic_mutation, "config": settings.topic_configs}
    out: list[Outgoing] = []
    bad = bad_events = 0
    with contextlib.ExitStack() as stack:
        source = open_input(args.input, stack)
        for number, line in enumerate(progress(source, args.quiet), start=1):
            if not line.strip():
                continue
            try:
                routed = route_line(line, number, columnar=args.format == "columnar")
            except BadLine as exc:
                bad += 1
                print(f"line {number}: {exc}", file=sys.stderr)
                continue
            for reason in routed.skipped:
                bad_events += 1
                rest = "" if args.strict else " (the batch's other events are sent)"
                print(f"line {number}: {reason}{rest}", file=sys.stderr)
            out.extend(routed.records)
    if (bad or bad_events) and args.strict:
        print(f"{_count(bad, 'bad line')}, {_count(bad_events, 'bad batch event')}: nothing sent "
              "(--strict)", file=sys.stderr)
        return 1
    counts, failed = run_kafka(bootstrap, _send(bootstrap, settings, topics, out, args))
    for topic in topics.values():
        if counts[topic]:
            print(f"{topic}: {_count(counts[topic], 'record')}")
    if not out:
        print("nothing to send")
    if bad:
        print(f"{_count(bad, 'bad line')} skipped", file=sys.stderr)
    if bad_events:
        print(f"{_count(bad_events, 'bad batch event')} skipped", file=sys.stderr)
    if failed:
        print(f"{_count(failed, 'record')} not sent (see above)", file=sys.stderr)
        return 1
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


async def _send(bootstrap: str, settings: Settings, topics: dict[str, str], out: list,
                args: argparse.Namespace) -> tuple[Counter[str], int]:
    """Send every record; one that the client or the broker refuses (too large, say) is
    reported with its line and the rest still go. Returns the counts sent and the failures."""
    from aiokafka.errors import KafkaError

    from app.admin.config_topic import entity_partition
    from app.errors import UserError
    from app.kafka.clients import producer
    from app.kafka.topics import ensure_topics
    from app.pipeline.topology import topic_specs

    signing, security = settings.signing(), settings.kafka_security()

    counts: Counter[str] = Counter()
    failed = 0
    if not out:
        return counts, failed
    needed = {topics[o.kind] for o in out}
    if not args.no_create_topics:
        await ensure_topics(bootstrap, [s for s in topic_specs(settings) if s[0] in needed],
                            security)
    async with producer(bootstrap, security=security) as p:
        partitions = {t: len(await p.partitions_for(t)) for t in sorted(needed)}
        if args.partition is not None:
            for kind in ("request", "connection", "mutation"):
                t = topics[kind]
                if t in partitions and args.partition >= partitions[t]:
                    raise UserError(f"--partition {args.partition}: topic {t!r} has "
                                    f"{partitions[t]} partitions (0..{partitions[t] - 1})")
        # configs first, acknowledged before any event: an event that reached Kafka before a
        # config could not be judged by it
        for stage in ([o for o in out if o.update is not None], [o for o in out if o.update is None]):
            futures = []
            for o in stage:
                topic = topics[o.kind]
                value = o.value
                if o.update is not None:
                    partition = entity_partition(o.update, partitions[topic])
                    value = signing.seal(topic, o.key, value)
                else:
                    partition = args.partition
                try:
                    futures.append((o, await p.send(topic, value, key=o.key, partition=partition)))
                except KafkaError as exc:
                    failed += 1
                    print(f"line {o.line}: not sent ({len(o.value):,} bytes): {exc}", file=sys.stderr)
            await p.flush()
            for o, f in futures:
                try:
                    await f
                    counts[topics[o.kind]] += 1
                except KafkaError as exc:
                    failed += 1
                    print(f"line {o.line}: not sent: {exc}", file=sys.stderr)
    return counts, failed
