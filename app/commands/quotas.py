"""`quota-streams quotas`: kafka-configs for quota entities, over the compacted config topic."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

from app.admin.entities import add_entity_options

EPILOG = """examples:
  quota-streams quotas alter --entity-type users --entity-name alice --add-config producer_byte_rate=1048576
  quota-streams quotas alter --entity-type users --entity-name alice --entity-type clients --entity-default \\
      --add-config request_percentage=50 --delete-config consumer_byte_rate
  quota-streams quotas alter --entity-type ips --entity-default --add-config connection_creation_rate=20
  quota-streams quotas alter --entity-type brokers --entity-default \\
      --add-config max.connection.creation.rate=100,listener.name.EXTERNAL.max.connection.creation.rate=30
  quota-streams quotas describe                                  # everything configured
  quota-streams quotas describe --user alice --client billing    # effective values, and where from
  quota-streams quotas resolve alice billing-app                 # limits, levels and metric tags

Reads KAFKA_BOOTSTRAP_SERVERS and QS_TOPIC_CONFIGS (see docs/admin.md)."""


class _Help(argparse.HelpFormatter):
    """Wraps descriptions; keeps the examples epilog (multi-line text) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quotas", help="alter, describe and resolve quota configs (like kafka-configs)",
        description="Set, show and explain quota configs. Writes and reads the compacted config "
        "topic the workers follow; values are validated as Kafka's KRaft controller does.",
        epilog=EPILOG, formatter_class=_Help)
    qs = p.add_subparsers(dest="action", metavar="ACTION")
    qs.required = True

    alter = qs.add_parser(
        "alter", help="add or delete quotas of one entity",
        description="Add or delete quotas of one entity, like `kafka-configs --alter`. Nothing is "
        "written unless every value is valid (> 0; integral for byte and connection rates; known "
        "keys; no IP with a user or client id).",
        epilog=EPILOG, formatter_class=_Help)
    add_entity_options(alter)
    alter.add_argument("--add-config", metavar="K=V,...",
                       help="quotas to set: producer_byte_rate, consumer_byte_rate, request_percentage, "
                       "controller_mutation_rate (users/clients); connection_creation_rate (ips); "
                       "max.connection.creation.rate, listener.name.L.max.connection.creation.rate (brokers)")
    alter.add_argument("--delete-config", metavar="K,...", help="quotas to remove")
    alter.add_argument("--no-create-topics", action="store_true",
                       help="do not create the config topic if it is missing")
    alter.add_argument("--json", action="store_true", help="print the records written as JSON lines")
    alter.set_defaults(run=run_alter)

    describe = qs.add_parser(
        "describe", help="show configured quotas (all, some, or one entity's effective values)",
        description="Without an entity: every configured quota with its level. With a type but "
        "no name (e.g. --entity-type users): the configured quotas of that kind of entity. With "
        "one entity: each quota type's effective value and the level it comes from.")
    add_entity_options(describe)
    describe.add_argument("--json", action="store_true", help="JSON instead of a table")
    describe.set_defaults(run=run_describe)

    resolve = qs.add_parser(
        "resolve", help="effective limits of a (user, client-id), with levels and metric tags",
        description="For a request from USER with CLIENT_ID: every client quota type's limit, the "
        "config level that chose it (Kafka's precedence) and the metric tags, i.e. who shares "
        "the window. Use '' for an empty user or client id.")
    resolve.add_argument("user", metavar="USER")
    resolve.add_argument("client_id", metavar="CLIENT_ID")
    resolve.add_argument("--json", action="store_true", help="JSON instead of a table")
    resolve.set_defaults(run=run_resolve)


def run_alter(args: argparse.Namespace) -> int:
    from app.admin.common import emit, run_kafka, settings_with_bootstrap
    from app.admin.config_topic import level_path, write_records
    from app.admin.entities import (
        build_records,
        describe_entity,
        parse_add_config,
        parse_delete_config,
        parse_entity,
    )
    from app.pipeline.topology import topic_specs

    spec = parse_entity(args.entity_parts, require_names=True)
    records = build_records(spec, parse_add_config(args.add_config), parse_delete_config(args.delete_config))
    settings, bootstrap = settings_with_bootstrap()
    topic = settings.topic_configs
    topic_spec = None if args.no_create_topics else next(s for s in topic_specs(settings) if s[0] == topic)
    run_kafka(bootstrap, write_records(bootstrap, topic, records, topic_spec, stamp_now=True,
                                       signing=settings.signing(),
                                       security=settings.kafka_security()))
    for record, _update in records:
        if args.json:
            emit(orjson.dumps(record).decode())
            continue
        changes = ", ".join(f"{k}={v}" if v is not None else f"{k} deleted"
                            for k, v in record["quotas"].items())
        emit(f"Completed updating config for {describe_entity(record['entity'])} "
              f"({level_path(record['entity'])}): {changes}")
    return 0


def _load(args: argparse.Namespace) -> Any:
    from app.admin.common import run_kafka, settings_with_bootstrap
    from app.admin.config_topic import load_configs

    settings, bootstrap = settings_with_bootstrap()
    topic = settings.topic_configs
    loaded = run_kafka(bootstrap, load_configs(bootstrap, topic, signing=settings.signing(),
                                               security=settings.kafka_security()))
    if not loaded.exists:
        print(f"note: config topic {topic!r} does not exist yet: no quotas are configured",
              file=sys.stderr)
    if loaded.bad:
        print(f"warning: {len(loaded.bad)} of {loaded.records} records in {topic!r} are invalid and "
              f"were skipped, as the workers skip them (first: {loaded.bad[0]})", file=sys.stderr)
    return loaded.configs


def run_describe(args: argparse.Namespace) -> int:
    from app.admin import views
    from app.admin.common import emit
    from app.admin.entities import parse_entity

    spec = parse_entity(args.entity_parts, require_names=False) if args.entity_parts else None
    if spec is not None and spec.complete:
        views.normal_entity(spec)  # a bad entity name is an error before Kafka is asked
    configs = _load(args)
    colour = views.use_colour(sys.stdout)
    if spec is not None and spec.complete:
        rows = views.describe_one(configs, spec)
        emit(_json(rows) if args.json else views.render_describe_one(rows, colour))
    else:
        rows = views.describe_all(configs, spec)
        emit(_json(rows) if args.json else views.render_describe_all(rows, colour))
    return 0


def run_resolve(args: argparse.Namespace) -> int:
    from app.admin import views
    from app.admin.common import emit

    configs = _load(args)
    rows = views.resolve_rows(configs, args.user, args.client_id)
    if args.json:
        emit(_json({"user": args.user, "client_id": args.client_id, "quotas": rows}))
    else:
        emit(views.render_resolve(args.user, args.client_id, rows, views.use_colour(sys.stdout)))
    return 0


def _json(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2).decode()


run = run_describe  # the module interface; each action sets its own `run`
