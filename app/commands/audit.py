"""`quota-streams audit`: recompute every decision with PySpark, diff against the control topic."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.commands.support import add_window_options, engine_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "audit",
        help="PySpark audit: recompute decisions, diff the control topic, usage, recommendations",
        description="Recompute every quota decision and directive from retained event topics "
        "(or archives) with the same engine the workers run, compare them with the directives "
        "on the control topic, and write Parquet datasets (deadletter, directives, diff, usage, "
        "recommendations, and with --decisions every decision), summary.json and an HTML "
        "report with charts. Exit "
        "status: 0 when mismatches are within --tolerance, 1 when they exceed it, 2 on a "
        "usage error. docs/audit.md explains the ordering rules and outputs.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("input")
    g.add_argument("--input", nargs="+", default=["kafka"], metavar="kafka|PATH",
                   help="'kafka' (the event topics) or archive files/directories: JSON lines "
                   "(.jsonl/.json, .gz) or Parquet")
    g.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", ""),
                   help="Kafka bootstrap servers (default: $KAFKA_BOOTSTRAP_SERVERS)")
    g.add_argument("--control", nargs="+", default=["auto"], metavar="auto|none|kafka|PATH",
                   help="directives to compare with: the control topic ('kafka'), directive "
                   "archives (JSON lines, e.g. from `quota-streams directives`), or none. auto: "
                   "the control topic for Kafka input, none for archives")
    g.add_argument("--from", dest="time_from", metavar="TIME",
                   help="audit decisions from this time (epoch ms or ISO-8601, UTC if no zone); "
                   "events from --warmup-ms earlier are replayed to fill the windows")
    g.add_argument("--to", dest="time_to", metavar="TIME", help="audit decisions before this time")
    g.add_argument("--warmup-ms", type=int, default=None,
                   help="events replayed before --from (default: twice the longest window span)")
    g.add_argument("--starting-offsets", metavar="JSON",
                   help='event topic start offsets, Spark style: {"topic": {"0": 42}}; '
                   "-2 earliest, -1 latest")
    g.add_argument("--ending-offsets", metavar="JSON", help="event topic end offsets (exclusive)")
    t = p.add_argument_group("topics (defaults from QS_TOPIC_*)")
    for name, env, default in (("request", "QS_TOPIC_REQUEST", "quota.events.request"),
                               ("connection", "QS_TOPIC_CONNECTION", "quota.events.connection"),
                               ("mutation", "QS_TOPIC_MUTATION", "quota.events.mutation"),
                               ("configs", "QS_TOPIC_CONFIGS", "quota.configs"),
                               ("directives", "QS_TOPIC_DIRECTIVES", "quota.directives")):
        t.add_argument(f"--topic-{name}", default=os.environ.get(env, default), metavar="NAME")
    o = p.add_argument_group("output")
    o.add_argument("--out", default="audit-out", help="output directory")
    o.add_argument("--entity", action="append", default=[], metavar="K=V[,K=V]",
                   help="chart usage vs limit for this entity (repeatable), e.g. "
                   "user=alice,client_id=app; default: the top throttled ones")
    o.add_argument("--bucket-ms", type=int, default=None,
                   help="time bucket of the usage dataset (default: automatic, at most ~240 "
                   "buckets over the audited span and at least one quota window)")
    o.add_argument("--decisions", action="store_true",
                   help="also write every decision (one row per event and quota, ~2 per event) "
                   "to OUT/decisions: ~25%% more wall time and ~45%% more Python CPU at 1M "
                   "events. Usage and recommendations come from per-window summaries either way")
    o.add_argument("--tolerance", default="0",
                   help="mismatches allowed before exiting 1: a count or a percentage ('0.5%%')")
    o.add_argument("--headroom", type=float, default=1.2,
                   help="suggested quota = p99 usage x headroom, rounded up")
    o.add_argument("--top", type=int, default=15, help="rows in the top-throttled table and chart")
    o.add_argument("--no-report", action="store_true", help="skip the HTML report and charts")
    o.add_argument("--quiet", action="store_true", help="no progress on stderr")
    s = p.add_argument_group("spark")
    s.add_argument("--master", default="local[*]", help="Spark master (local[*] or a cluster URL)")
    s.add_argument("--driver-memory", default="1g", help="spark.driver.memory")
    s.add_argument("--partitions", type=int, default=None,
                   help="route partitions of the recompute (default: Spark's parallelism)")
    add_window_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.errors import UserError

    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise UserError("the audit needs PySpark: pip install 'quota-streams[audit]'") from None
    from app.audit.common import parse_when
    from app.audit.job import run_audit
    from app.audit.kafka_reads import existing_topics
    from app.audit.options import AuditError, AuditOptions, Topics
    from app.audit.session import Progress, build_session
    from app.audit.report import format_recommendations

    try:
        time_from = parse_when(args.time_from) if args.time_from else None
        time_to = parse_when(args.time_to) if args.time_to else None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if time_from is not None and time_to is not None and time_to <= time_from:
        raise UserError("--to must be later than --from")
    if (args.starting_offsets or args.ending_offsets) and args.input != ["kafka"]:
        raise UserError("--starting-offsets/--ending-offsets apply to --input kafka only")
    needs_kafka = args.input == ["kafka"] or args.control == ["kafka"]
    if needs_kafka and not args.bootstrap:
        raise UserError("Kafka input/control needs --bootstrap or KAFKA_BOOTSTRAP_SERVERS")
    for path in ([] if args.input == ["kafka"] else args.input) + [
            c for c in args.control if c not in ("auto", "none", "kafka")]:
        if "://" not in path and not any(ch in path for ch in "*?[") and not Path(path).exists():
            raise UserError(f"{path} does not exist")
    for name in ("bucket_ms", "top"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1")
    if args.headroom <= 0:
        raise UserError("--headroom must be > 0")
    _check_out(args.out)
    from app.kafka.security import PLAINTEXT
    from app.settings import load

    process = load()  # the Kafka security and the signing keys, as every component's
    signing = process.signing()
    # archives alone need no connection, nor its TLS files
    security = process.kafka_security() if needs_kafka else PLAINTEXT
    if needs_kafka:  # before Spark's ~10 s start: an unreachable cluster is known in a moment
        from app.kafka.clients import quiet_client_logs

        quiet_client_logs()
        try:
            existing_topics(args.bootstrap, security)
        except AuditError as exc:
            raise UserError(str(exc)) from None
    opts = AuditOptions(
        out=args.out, inputs=args.input, settings=engine_settings(args),
        topics=Topics(args.topic_request, args.topic_connection, args.topic_mutation,
                      args.topic_configs, args.topic_directives),
        bootstrap=args.bootstrap, security=security, signing=signing, control=args.control,
        time_from=time_from, time_to=time_to,
        warmup_ms=args.warmup_ms, starting_offsets=args.starting_offsets,
        ending_offsets=args.ending_offsets, partitions=args.partitions,
        bucket_ms=args.bucket_ms, entities=args.entity, tolerance=args.tolerance,
        headroom=args.headroom, top=args.top, report=not args.no_report,
        decisions=args.decisions,
    )
    progress = Progress(quiet=args.quiet)
    progress.step(f"starting Spark ({args.master})")
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    try:
        spark = build_session(args.master, args.driver_memory, args.partitions)
    except Exception as exc:  # noqa: BLE001 - no Java, bad master URL: one line
        raise UserError(f"cannot start Spark ({args.master}): {str(exc).splitlines()[0]}") from None
    try:
        summary = run_audit(spark, opts, progress)
    except AuditError as exc:
        raise UserError(str(exc)) from None
    finally:
        if existing is None:
            spark.stop()
    _print_summary(summary, format_recommendations)
    return 0 if summary["passed"] else 1


def _print_summary(summary: dict, format_recommendations) -> None:  # type: ignore[no-untyped-def]
    counts = summary["counts"]
    print(f"audited {summary['input']}")
    print("  " + ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in counts.items()
                           if isinstance(v, int)))
    diff = summary.get("diff")
    if diff:
        print("  diff: " + ", ".join(f"{k} {diff[k]:,}" for k in
                                     ("matched", "different", "missing", "unexpected",
                                      "duplicate", "invalid")))
        print(f"  {'PASS' if summary['passed'] else 'FAIL'}: {diff['mismatches']:,} mismatches, "
              f"tolerance {summary['tolerance']}")
    else:
        print("  no control directives compared (--control)")
    recs = summary.get("recommendations_top") or []
    if recs:
        print("\nrecommendations (top 10; all in recommendations/):")
        print(format_recommendations(recs))
    print("\noutputs:")
    for name, path in summary["outputs"].items():
        print(f"  {name:16} {path}")
    print(f"  {'summary':16} {summary['outputs']['decisions'].rsplit('/', 1)[0]}/summary.json")
    if sys.stdout.isatty():
        print(f"took {summary['seconds']['total']:.1f}s")


def _check_out(out: str) -> None:
    """A local output directory must be creatable before Spark starts (remote ones, s3a:// or
    hdfs://, are Spark's to reach)."""
    from app.errors import UserError

    if "://" in out and not out.startswith("file:"):
        return
    path = Path(out.removeprefix("file://").removeprefix("file:"))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot write --out {out}: {exc.strerror}") from None
