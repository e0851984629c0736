"""`quota-streams broker`: the embedded Kafka-protocol broker, in the foreground."""

from __future__ import annotations

import argparse
import signal
import time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker", help="run the embedded broker (Tansu) on loopback",
                       description="Start the embedded Kafka-protocol broker (Tansu, memory "
                       "storage) on 127.0.0.1, print its bootstrap address, run until Ctrl-C.")
    p.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    p.add_argument("--create-topics", action="store_true",
                   help="also create the product's topics with the configured partition counts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.broker import BrokerError, EmbeddedBroker
    from app.cli import UserError

    try:
        broker = EmbeddedBroker(port=args.port or None).start()
    except BrokerError as exc:
        raise UserError(str(exc)) from None
    try:
        if args.create_topics:
            from app.broker import create_topics_sync
            from app.pipeline.topology import topic_specs
            from app.settings import load

            create_topics_sync(broker.bootstrap, topic_specs(load()))
        print(f"embedded broker listening: KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap}", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while broker.running:
            time.sleep(0.5)
        raise UserError("the embedded broker exited; see its log: " + str(broker.log_path))
    except KeyboardInterrupt:
        return 0
    finally:
        broker.stop()
