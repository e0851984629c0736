"""`quota-streams worker`: run one production worker of the Faust app."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from app.commands.support import ensure_product_topics
from app.settings import load


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "worker",
        help="run a quota-streams worker (Faust) against KAFKA_BOOTSTRAP_SERVERS",
        description="Run one worker of the Faust app. Settings come from the environment "
        "(see the README's settings table). Start several to scale out: they split the "
        "partitions and take over each other's windows from the changelog.",
    )
    p.add_argument("--no-create-topics", action="store_true",
                   help="do not create missing topics at start (when an operator manages them)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from app.errors import UserError

    settings = load()
    if settings.local_cluster:
        raise UserError("KAFKA_BOOTSTRAP_SERVERS is not set: point it at your Kafka cluster, "
                        "or run `quota-streams broker` and export the address it prints")
    check_web_address(settings.web_host, settings.web_port)
    if not args.no_create_topics:
        ensure_product_topics(settings, settings.kafka_security())
    try:
        os.makedirs(settings.state_dir, exist_ok=True)
    except OSError as exc:
        raise UserError(f"QS_STATE_DIR={settings.state_dir}: cannot create it ({exc.strerror})") from None
    from app.pipeline.faust_app import app

    level = {"WARNING": "warn"}.get(settings.log_level, settings.log_level.lower())
    sys.argv = ["quota-streams", "worker", "-l", level,
                "--web-port", str(settings.web_port), "--web-bind", settings.web_host]
    app.main()
    return 0


def check_web_address(host: str, port: int) -> None:
    """The web server's address, tried before Faust starts: a port in use or a host that does
    not resolve would otherwise surface as a traceback from deep inside the worker."""
    from app.errors import UserError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UserError(f"QS_WEB_HOST={host}: cannot resolve it ({exc.strerror}); use an "
                        "address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise UserError(f"QS_WEB_HOST={host} QS_WEB_PORT={port}: cannot listen there "
                            f"({exc.strerror}); choose a free port") from None
