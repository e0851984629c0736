"""`python -m app.clients KIND ...`: run one client program (see the package docstring)."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from app.clients import security
from app.clients.producers import PROGRAM_LIBRARIES
from app.clients.report import Reporter
from app.commands.support import int_at_least, positive_float
from app.errors import UserError
from app.kafka.security import KafkaSecurity


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m app.clients",
                                     description="Real Kafka clients that report what they achieve "
                                     "each second as JSON lines.")
    parser.add_argument("--name", default="client", help="name on every line")
    parser.add_argument("--seconds", type=positive_float, default=30.0, help="how long to run")
    parser.add_argument("--epoch", type=positive_float, metavar="UNIX_S",
                        help="count the report's seconds from this wall-clock time (default: "
                        "the start), so clients started together line up")
    parser.add_argument("--start", type=float, default=0.0, metavar="S",
                        help="begin S seconds after --epoch (default: at once)")
    sub = parser.add_subparsers(dest="kind", required=True)
    p = sub.add_parser("produce", help="offer RATE bytes/s to a topic")
    p.add_argument("--library", choices=PROGRAM_LIBRARIES, required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--client-id", required=True)
    p.add_argument("--rate", type=positive_float, required=True, help="bytes/s offered")
    p.add_argument("--record-bytes", type=int_at_least(1), default=1000)
    p.add_argument("--window", type=int_at_least(1), default=256 * 1024,
                   help="unacknowledged bytes at most (default %(default)s)")
    p.add_argument("--request-timeout-ms", type=int_at_least(10), metavar="MS",
                   help="confluent-kafka: how long a request may go unanswered before the "
                   "client drops the connection and sends it again on a new one "
                   "(socket.timeout.ms; default: the library's, 60000)")
    security.add_flags(p)
    c = sub.add_parser("consume", help="read a topic from the beginning in a group")
    c.add_argument("--library", choices=PROGRAM_LIBRARIES, required=True)
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--client-id", required=True)
    c.add_argument("--group", required=True)
    c.add_argument("--fetch-bytes", type=int_at_least(1), default=65536,
                   help="max bytes per partition per fetch (default %(default)s)")
    c.add_argument("--session-timeout-ms", type=int_at_least(1000), metavar="MS",
                   help="confluent-kafka: how long the group waits for a heartbeat before it "
                   "drops the consumer; Kafka mutes a throttled consumer's connections, group "
                   "requests included (default: 6000, for quick joins; the library's is 45000)")
    security.add_flags(c)
    s = sub.add_parser("connection-storm", help="new connections at RATE/s from SOURCES")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int_at_least(1), required=True)
    s.add_argument("--sources", required=True, help="comma-separated source addresses")
    s.add_argument("--rate", type=positive_float, required=True)
    t = sub.add_parser("topic-storm", help="CreateTopics at RATE/s")
    t.add_argument("--library", choices=("kafka-python", "confluent-kafka"), required=True)
    t.add_argument("--bootstrap", required=True)
    t.add_argument("--client-id", required=True)
    t.add_argument("--rate", type=positive_float, required=True)
    t.add_argument("--partitions", type=int_at_least(1), default=10)
    t.add_argument("--prefix", help="topic names are PREFIX-1, PREFIX-2, ... (default: random)")
    t.add_argument("--keep", type=int_at_least(1), default=10,
                   help="topics kept at most: past it the oldest is deleted (default %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 2 bad arguments, 3 the broker refused the authentication (one line
    on stderr: `authentication failed: <the library's report>`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "request_timeout_ms", None) is not None and args.library != "confluent-kafka":
        parser.error("--request-timeout-ms is for the confluent-kafka producer")
    if getattr(args, "session_timeout_ms", None) is not None and args.library != "confluent-kafka":
        parser.error("--session-timeout-ms is for the confluent-kafka consumer")
    kafka_security = None
    if args.kind in ("produce", "consume"):
        try:
            kafka_security = security.from_args(args)
        except ValueError as exc:
            parser.error(str(exc))
    logging.basicConfig(level=logging.CRITICAL)  # the libraries' retries are not the report
    reporter = Reporter(args.name, epoch=args.epoch)
    if args.epoch is not None:
        time.sleep(max(0.0, args.epoch + args.start - time.time()))
    try:
        if kafka_security is not None and args.library == "java":
            from app.clients import java

            java.run(args.kind, _program_options(args), kafka_security)
            return 0
        if kafka_security is not None and args.library == "kafkajs":
            from app.clients import node

            if kafka_security.protocol != "PLAINTEXT":
                raise UserError("the kafkajs programs connect in plain text only")
            node.run(args.kind, _program_options(args))
            return 0
        _run(args, kafka_security, reporter)
    except security.AuthenticationFailed as exc:
        print(f"authentication failed: {exc}", file=sys.stderr)
        return security.AUTHENTICATION_FAILED
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 2
    reporter.finish()
    return 0


def _program_options(args: argparse.Namespace) -> dict[str, object]:
    """The flags the Java and Node.js programs share with this one (app/clients/java.py,
    app/clients/node.py)."""
    common = {"name": args.name, "seconds": args.seconds, "epoch": args.epoch,
              "bootstrap": args.bootstrap, "topic": args.topic, "client-id": args.client_id}
    if args.kind == "produce":
        return {**common, "rate": args.rate, "record-bytes": args.record_bytes,
                "window": args.window}
    return {**common, "group": args.group, "fetch-bytes": args.fetch_bytes}


def _run(args: argparse.Namespace, kafka_security: KafkaSecurity | None,
         reporter: Reporter) -> None:
    if args.kind == "produce":
        from app.clients.producers import produce

        assert kafka_security is not None
        produce(args.library, args.bootstrap, args.topic, args.client_id, args.rate,
                args.record_bytes, args.seconds, args.window, reporter, kafka_security,
                args.request_timeout_ms)
    elif args.kind == "consume":
        from app.clients.consumers import consume

        assert kafka_security is not None
        consume(args.library, args.bootstrap, args.topic, args.client_id, args.group,
                args.seconds, args.fetch_bytes, reporter, kafka_security, args.session_timeout_ms)
    elif args.kind == "connection-storm":
        from app.clients.storms import connection_storm

        connection_storm(args.host, args.port, args.sources.split(","), args.rate, args.seconds,
                         reporter)
    else:
        from app.clients.storms import topic_storm

        topic_storm(args.library, args.bootstrap, args.client_id, args.rate, args.partitions,
                    args.seconds, reporter, args.prefix, args.keep)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
