"""`quota-streams broker`: a local Apache Kafka cluster, in the foreground."""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from app.devstack.kafka import PROTOCOLS

    p = sub.add_parser(
        "broker", help="run a local Apache Kafka cluster (KRaft, 1 or 3 nodes) on loopback",
        description="Start Apache Kafka (the version `make setup` fetched) on 127.0.0.1: 1 or 3 "
        "KRaft nodes, the listeners asked for, SASL users with PLAIN and SCRAM credentials. "
        "Prints where each listener is and runs until Ctrl-C; the data goes with it.")
    p.add_argument("--brokers", type=int, choices=(1, 3), default=1, help="nodes (default 1)")
    p.add_argument("--listener", action="append", choices=PROTOCOLS, metavar="PROTOCOL",
                   help=f"a client listener, repeatable: {', '.join(PROTOCOLS)} "
                   "(default PLAINTEXT)")
    p.add_argument("--user", action="append", default=[], metavar="NAME[:PASSWORD]",
                   help="a SASL user (repeatable; a random password unless given)")
    p.add_argument("--dir", metavar="DIR", help="keep the data and logs here (default: a "
                   "temporary directory, removed on exit)")
    p.add_argument("--create-topics", action="store_true",
                   help="also create the product's topics with the configured partition counts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.devstack.kafka import KafkaCluster, describe
    from app.errors import UserError

    users: dict[str, str | None] = {}
    for spec in args.user:
        name, _, password = spec.partition(":")
        if not name:
            raise UserError(f"--user {spec!r}: give NAME or NAME:PASSWORD")
        users[name] = password or None
    listeners = tuple(dict.fromkeys(args.listener or ["PLAINTEXT"]))
    if users and not any(name.startswith("SASL_") for name in listeners):
        raise UserError("--user needs a SASL listener: add --listener SASL_PLAINTEXT or SASL_SSL")
    cluster = KafkaCluster(brokers=args.brokers, listeners=listeners, users=users,
                           work_dir=Path(args.dir) if args.dir else None)
    cluster.start()
    try:
        first = listeners[0]
        if args.create_topics:
            from app.kafka.topics import create_topics_sync
            from app.pipeline.topology import topic_specs
            from app.settings import load

            if first != "PLAINTEXT":
                raise UserError("--create-topics needs the PLAINTEXT listener")
            settings = load()
            create_topics_sync(cluster.bootstrap(first), topic_specs(settings),
                               security=settings.kafka_security(), replication_factor=args.brokers)
        for line in describe(cluster):
            print(line, flush=True)
        print(f"Kafka running: KAFKA_BOOTSTRAP_SERVERS={cluster.bootstrap(first)}", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while cluster.running:
            time.sleep(0.5)
        raise UserError(f"a Kafka node exited; see the logs in {cluster.work_dir}")
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()
