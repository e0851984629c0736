"""`quota-streams explain`: why an entity was (or was not) throttled at a time."""

from __future__ import annotations

import argparse
import os

from app.commands.support import add_window_options, engine_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explain",
        help="why was this entity throttled at this time (replays the input, no Spark)",
        description="Replay the input up to --at with the quota engine and, for each quota "
        "window of the entity, print the config level that chose the limit, the window's "
        "samples, the observed rate, the throttle formula with its numbers and the directive "
        "that resulted. Input is read in-process: the event topics (and the config topic) or "
        "archive files, in the audit's order (docs/audit.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--entity", required=True, metavar="K=V[,K=V]",
                   help="a principal or quota entity: user=alice,client_id=app, user=alice, "
                   "client_id=app, ip=10.0.0.1, broker=1[,listener=EXTERNAL]")
    p.add_argument("--at", required=True, metavar="TIME",
                   help="epoch ms or ISO-8601 (UTC if no zone)")
    p.add_argument("--input", nargs="+", default=["kafka"], metavar="kafka|PATH",
                   help="'kafka' or archive files (JSON lines, optionally .gz; event Parquet)")
    p.add_argument("--quota", action="append", default=[],
                   help="only this quota type (repeatable), e.g. producer_byte_rate")
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
                   help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    for name, env, default in (("request", "QS_TOPIC_REQUEST", "quota.events.request"),
                               ("connection", "QS_TOPIC_CONNECTION", "quota.events.connection"),
                               ("mutation", "QS_TOPIC_MUTATION", "quota.events.mutation"),
                               ("configs", "QS_TOPIC_CONFIGS", "quota.configs")):
        p.add_argument(f"--topic-{name}", default=os.environ.get(env, default), metavar="NAME")
    add_window_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.audit.common import parse_when
    from app.audit.explain import ExplainError, explain, iter_quota_names, read_files, read_kafka
    from app.contract.entities import parse_entity_string
    from app.explanation import render
    from app.audit.options import AuditError, Topics
    from app.errors import UserError
    from app.settings import load

    try:
        spec = parse_entity_string(args.entity)
        at = parse_when(args.at)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    unknown = set(args.quota) - set(iter_quota_names())
    if unknown:
        raise UserError(f"unknown quota type {', '.join(sorted(unknown))}; one of "
                        f"{', '.join(iter_quota_names())}")
    settings = engine_settings(args)
    try:
        if args.input == ["kafka"]:
            if not args.bootstrap:
                raise UserError("--input kafka needs --bootstrap or KAFKA_BOOTSTRAP_SERVERS")
            topics = Topics(args.topic_request, args.topic_connection, args.topic_mutation,
                            args.topic_configs)
            process = load()  # the Kafka security and the signing keys, as every component's
            mode, streams, records, configs = read_kafka(args.bootstrap, topics,
                                                         process.kafka_security(),
                                                         process.signing())
            source = f"kafka {args.bootstrap}"
        else:
            mode, streams, records, configs = read_files(args.input)
            source = " ".join(args.input)
        result = explain(spec, at, settings, mode, streams, records, configs, source,
                         set(args.quota) or None)
    except (ExplainError, AuditError) as exc:
        raise UserError(str(exc)) from None
    print(render(result, settings), end="")
    return 0 if result.windows else 1
