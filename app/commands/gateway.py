"""`quota-streams gateway`: the Kafka wire-protocol gateway, in the foreground."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from typing import TYPE_CHECKING

from app.commands.support import int_at_least, positive_float
from app.gateway.limits import MAX_REQUEST_BYTES, PRE_AUTH_FRAME, Limits

if TYPE_CHECKING:
    from app.gateway.config import GatewayConfig
    from app.gateway.server import Gateway
    from app.settings import Settings

EPILOG = """\
Ports: clients bootstrap at --listen; broker N is reached at
--node-port-base + (N - --first-node-id) (defaults: the listen port + 1, and the lowest node
id the cluster reports first: at start, or with --upstream-sasl once a client has
authenticated). Every address the cluster hands a client is rewritten to
these, so clients never talk to a broker directly.

The gateway's own Kafka connection (usage events out, directives in) uses
KAFKA_BOOTSTRAP_SERVERS, default the --upstream cluster, and the QS_TOPIC_* names.
docs/gateway.md has the deployment guide."""


def address(raw: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 as [HOST]:PORT), for argparse."""
    host, sep, port = raw.rpartition(":")
    host = host.strip("[]")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"{raw!r} is not HOST:PORT")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r}: the port is not a number") from None
    if not 0 < number < 65536:
        raise argparse.ArgumentTypeError(f"{raw!r}: the port must be 1-65535")
    return host, number


def addresses(raw: str) -> tuple[tuple[str, int], ...]:
    return tuple(address(part.strip()) for part in raw.split(",") if part.strip())


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gateway", help="run a Kafka protocol gateway that measures clients and obeys directives",
        description="Proxy Kafka clients to a cluster, unmodified: measure their usage like a "
        "broker (usage events to the event topics) and enforce the directives the workers "
        "publish (throttle_time_ms plus muting, THROTTLING_QUOTA_EXCEEDED, connection delay "
        "and close).", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--upstream", required=True, type=addresses, metavar="HOST:PORT[,...]",
                   help="the cluster's bootstrap address(es)")
    p.add_argument("--listen", required=True, type=address, metavar="HOST:PORT",
                   help="where clients bootstrap instead")
    p.add_argument("--advertised-host", metavar="HOST",
                   help="host clients reach the gateway at (default: the --listen host)")
    p.add_argument("--listener-name", default="PLAINTEXT", metavar="NAME",
                   help="listener name in connection events and listener quotas (default %(default)s)")
    p.add_argument("--node-port-base", type=int_at_least(1), metavar="PORT",
                   help="gateway port of the first broker (default: listen port + 1)")
    p.add_argument("--first-node-id", type=int_at_least(0), metavar="N",
                   help="node id reached at --node-port-base (default: the lowest the cluster "
                   "names first)")
    p.add_argument("--max-nodes", type=int_at_least(1), default=64, metavar="N",
                   help="broker ports to use at most (default %(default)s)")
    p.add_argument("--bootstrap-node-id", type=int_at_least(0), metavar="N",
                   help="broker id that bootstrap connections are charged to (default: the "
                   "broker at --upstream, else the lowest)")
    p.add_argument("--flush-ms", type=int_at_least(1), default=5, metavar="MS",
                   help="how often usage events are sent (default %(default)s)")
    p.add_argument("--aggregate", action="store_true",
                   help="pre-aggregate requests per principal, api and flush into one event with "
                   "count > 1 (high request rates; broker scope then is exact per flush, not per "
                   "request)")
    p.add_argument("--max-in-flight", type=int_at_least(1), default=5, metavar="N",
                   help="requests of a connection without a quota forwarded before the first is "
                   "answered (default %(default)s). A client with a quota is served one request "
                   "at a time, as a broker does, so a throttle holds back its next request")
    p.add_argument("--gateway-id", type=int_at_least(0), metavar="N",
                   help="this gateway's id when several gateways share the cluster: its usage "
                   "events carry it, and with QS_CLUSTER_ENFORCEMENT=allocations each gateway, "
                   "not each broker, holds a share of a cluster-scope quota (needs --gateways)")
    p.add_argument("--gateways", type=int_at_least(1), metavar="N",
                   help="how many named gateways share the cluster: without an allocation in "
                   "force (before the first, or when the workers stop) each holds quota / N")
    p.add_argument("--no-local-quotas", action="store_true",
                   help="obey only the workers' directives; by default the gateway also decides "
                   "each request as Kafka's quota managers would for its own traffic (the "
                   "QS_QUOTA_WINDOW_* and QS_CONTROLLER_WINDOW_* settings, configs from "
                   "QS_TOPIC_CONFIGS) and applies the larger throttle; not with allocations, "
                   "which only those quota managers enforce")
    p.add_argument("--upstream-sasl", action="store_true",
                   help="the upstream listener requires SASL: before a connection has "
                   "authenticated, only ApiVersions and SASL requests are served (anything else "
                   "closes it, as a broker does) and its frames are held to 512 KiB; the "
                   "start-up probe asks ApiVersions only, and the brokers are learned once a "
                   "client has authenticated unless --first-node-id and --bootstrap-node-id "
                   "are given")
    p.add_argument("--proxy-protocol", action="store_true",
                   help="every client connection starts with a PROXY protocol header (v1 or v2) "
                   "from a load balancer, naming the client: its address is the one per-IP "
                   "caps, connection quotas and usage events see; a connection without a "
                   "valid header is closed. Only behind a balancer that always sends one: "
                   "anyone who can reach the gateway directly could name any address")
    limits = p.add_argument_group("limits (what a connection is held to; docs/gateway.md)")
    limits.add_argument("--max-request-bytes", type=int_at_least(PRE_AUTH_FRAME),
                        default=MAX_REQUEST_BYTES, metavar="N",
                        help="largest request frame, refused on its size prefix (Kafka's "
                        "socket.request.max.bytes; default %(default)s)")
    limits.add_argument("--max-connections", type=int_at_least(1), default=Limits.max_connections,
                        metavar="N", help="client connections open at once; the newest past "
                        "it is closed (default %(default)s)")
    limits.add_argument("--max-connections-per-ip", type=int_at_least(1),
                        default=Limits.max_connections_per_ip, metavar="N",
                        help="client connections open at once from one IP (default %(default)s)")
    limits.add_argument("--max-queued-connections", type=int_at_least(1),
                        default=Limits.max_queued_connections, metavar="N",
                        help="connections waiting for one broker port while a connection quota "
                        "delays it; the newest past it is closed (default %(default)s)")
    limits.add_argument("--idle-timeout-ms", type=int_at_least(1), default=Limits.idle_timeout_ms,
                        metavar="MS", help="close a connection idle this long (Kafka's "
                        "connections.max.idle.ms; default %(default)s)")
    limits.add_argument("--request-timeout-ms", type=int_at_least(1),
                        default=Limits.request_timeout_ms, metavar="MS",
                        help="close a connection whose broker leaves a request unanswered this "
                        "long; keep it above the consumers' max.poll.interval.ms, which a "
                        "JoinGroup may wait (default %(default)s)")
    p.add_argument("--directives-timeout", type=positive_float, default=30.0, metavar="S",
                   help="how long to wait at start for the directives to be rebuilt (default %(default)s)")
    p.add_argument("--metrics-port", type=int_at_least(0), default=0, metavar="PORT",
                   help="serve /metrics (Prometheus) and /ready (200 while listening with the "
                   "directives and configs read and its readers running; 503 otherwise, and "
                   "from SIGTERM on) on this port (default: off)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address the metrics server binds (default %(default)s)")
    p.add_argument("--drain-timeout-ms", type=int_at_least(0), default=30_000, metavar="MS",
                   help="on SIGTERM or SIGINT: stop accepting connections and handling "
                   "requests, write the answers owed to requests in flight, close each "
                   "connection once it owes nothing, for at most this long; then publish the "
                   "last usage events and exit 0 (default %(default)s; keep it under "
                   "Kubernetes' terminationGracePeriodSeconds)")
    tls = p.add_argument_group("TLS (clients to gateway, gateway to brokers)")
    tls.add_argument("--tls-cert", metavar="FILE", help="certificate clients see (PEM); enables TLS")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")
    tls.add_argument("--tls-client-ca", metavar="FILE",
                     help="require every client to present a certificate this CA (PEM) signed "
                     "(mutual TLS; needs --tls-cert)")
    tls.add_argument("--upstream-tls", action="store_true",
                     help="connect to the brokers with TLS (implied by the other --upstream-* "
                     "TLS options)")
    tls.add_argument("--upstream-ca", metavar="FILE",
                     help="CA bundle for the brokers' certificates (default: the system's)")
    tls.add_argument("--upstream-cert", metavar="FILE",
                     help="client certificate the gateway presents to the brokers (PEM): every "
                     "client reaches them as this identity, so it needs --tls-client-ca or "
                     "--upstream-cert-shared-identity")
    tls.add_argument("--upstream-key", metavar="FILE", help="its private key (PEM)")
    tls.add_argument("--upstream-cert-shared-identity", action="store_true",
                     help="allow --upstream-cert without client certificates: every client, "
                     "anonymous ones included, shares the gateway's identity at the brokers")
    tls.add_argument("--upstream-no-hostname-check", action="store_true",
                     help="do not check that the brokers' certificates name the host (the chain "
                     "is still verified)")
    p.add_argument("--no-create-topics", action="store_true",
                   help="do not create missing product topics at start (when an operator manages them)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   help="default: QS_LOG_LEVEL (info)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from app.errors import UserError
    from app.gateway.memory import fix_malloc_thresholds
    from app.gateway.server import Gateway, GatewayError

    from app.settings import load

    settings = load()
    config = build_config(args, settings)
    if not args.no_create_topics:
        from app.commands.support import ensure_product_topics

        ensure_product_topics(settings, config.kafka_security, config.kafka_bootstrap,
                              "check KAFKA_BOOTSTRAP_SERVERS" if settings.kafka_bootstrap_servers
                              else "check --upstream (the gateway's own Kafka connection uses it "
                              "while KAFKA_BOOTSTRAP_SERVERS is not set)")
    logging.basicConfig(level=log_level(args, settings), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("aiokafka", "kafka"):
        logging.getLogger(name).setLevel(logging.WARNING)
    fix_malloc_thresholds()
    gateway = Gateway(config)
    try:
        asyncio.run(_serve(gateway, args))
    except GatewayError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot listen on {config.listen[0]}:{config.listen[1]} or its broker "
                        f"ports: {exc.strerror or exc}") from None
    return 0


async def _serve(gateway: Gateway, args: argparse.Namespace) -> None:
    """Serve until SIGTERM or SIGINT, then drain (`Gateway.drain`) and stop. The HTTP port
    answers from the start, so that a probe sees the gateway starting (not ready) rather than
    nothing, and keeps answering through the drain (503)."""
    import asyncio
    import signal

    from app.gateway.server import GatewayError
    from app.gateway.status import StatusServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    status = StatusServer(gateway.metrics.registry, gateway.readiness)
    try:
        if args.metrics_port:
            try:
                await status.start(args.metrics_host, args.metrics_port)
            except OSError as exc:
                raise GatewayError(f"cannot serve metrics on {args.metrics_host}:"
                                   f"{args.metrics_port}: {exc.strerror or exc}") from None
        await gateway.start()
        cfg = gateway.config
        print(f"gateway ready: bootstrap {cfg.advertised_host}:{cfg.listen[1]}; brokers "
              f"{gateway.describe_ports()}", flush=True)
        await stop.wait()
        gateway.drain()
        await gateway.drained(args.drain_timeout_ms / 1000.0)
    finally:
        await gateway.stop()  # also what a failed start opened; the last events go out
        await status.stop()


def log_level(args: argparse.Namespace, settings: Settings) -> str:
    """`--log-level`, else QS_LOG_LEVEL: the setting every process of a deployment shares."""
    return str(args.log_level or settings.log_level).upper()


def build_config(args: argparse.Namespace, settings: Settings) -> GatewayConfig:
    """The validated `GatewayConfig` for these arguments and settings."""
    from app.enforcement.local import broker_settings
    from app.engine.events import MAX_ID
    from app.errors import UserError
    from app.gateway.config import GatewayConfig
    from app.gateway.tls import client_context, server_context

    host = args.advertised_host or args.listen[0]
    try:
        if ipaddress.ip_address(host).is_unspecified:
            raise UserError(f"--listen {args.listen[0]} binds every address: give --advertised-host, "
                            "the host clients reach the gateway at")
    except ValueError:
        pass  # a host name
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UserError("--tls-cert and --tls-key go together")
    if args.proxy_protocol and args.tls_cert:
        raise UserError("--proxy-protocol with --tls-cert is not supported (the PROXY header "
                        "comes before the TLS handshake): terminate TLS at the load balancer, or "
                        "use the gateway's TLS without the PROXY protocol")
    check_upstream_identity(args)
    if (args.gateway_id is None) != (args.gateways is None):
        raise UserError("--gateway-id and --gateways go together: give every gateway in front "
                        "of the cluster its own id and the same --gateways count")
    if args.gateway_id is not None and args.gateway_id > MAX_ID:
        raise UserError(f"--gateway-id must be at most {MAX_ID}")
    kafka = settings.kafka_bootstrap_servers or ",".join(f"{h}:{p}" for h, p in args.upstream)
    engine = settings.engine()
    if args.no_local_quotas and engine.allocations:  # nothing would hold the client quotas
        raise UserError("--no-local-quotas cannot go with QS_CLUSTER_ENFORCEMENT=allocations: "
                        "allocations are enforced by the gateway's own quota managers and the "
                        "workers publish no throttle directives for them; drop the flag")
    return GatewayConfig(
        upstream=args.upstream, listen=args.listen, advertised_host=host, kafka_bootstrap=kafka,
        topics={"request": settings.topic_request, "connection": settings.topic_connection,
                "mutation": settings.topic_mutation},
        directives_topic=settings.topic_directives, configs_topic=settings.topic_configs,
        kafka_security=settings.kafka_security(), signing=settings.signing(),
        local=None if args.no_local_quotas else broker_settings(engine),
        allocations=engine.allocations,
        columnar_events=settings.event_format == "columnar",
        max_record_bytes=settings.event_record_bytes,
        gateway_id=args.gateway_id, gateways=args.gateways or 1, listener=args.listener_name,
        node_port_base=args.node_port_base, first_node_id=args.first_node_id,
        bootstrap_node_id=args.bootstrap_node_id, max_nodes=args.max_nodes,
        flush_ms=args.flush_ms, aggregate=args.aggregate, max_in_flight=args.max_in_flight,
        directives_timeout=args.directives_timeout, upstream_sasl=args.upstream_sasl,
        proxy_protocol=args.proxy_protocol,
        limits=Limits(max_request_bytes=args.max_request_bytes,
                      max_connections=args.max_connections,
                      max_connections_per_ip=args.max_connections_per_ip,
                      max_queued_connections=args.max_queued_connections,
                      idle_timeout_ms=args.idle_timeout_ms,
                      request_timeout_ms=args.request_timeout_ms),
        client_tls=server_context(args.tls_cert, args.tls_key, args.tls_client_ca)
        if args.tls_cert else None,
        upstream_tls=client_context(args.upstream_ca, args.upstream_cert, args.upstream_key,
                                    not args.upstream_no_hostname_check)
        if args.upstream_tls or args.upstream_ca or args.upstream_cert
        or args.upstream_no_hostname_check else None,
    )


def check_upstream_identity(args: argparse.Namespace) -> None:
    """The TLS flags that only mean something together. A certificate the gateway presents to
    the brokers is presented for every client: allowed only when every client had to present
    its own (`--tls-client-ca`), or when the operator says every client shares it."""
    from app.errors import UserError

    if args.tls_client_ca and not args.tls_cert:
        raise UserError("--tls-client-ca needs --tls-cert and --tls-key: client certificates are "
                        "asked for in the gateway's own TLS handshake")
    if args.upstream_key and not args.upstream_cert:
        raise UserError("--upstream-key goes with --upstream-cert")
    if args.upstream_cert_shared_identity and not args.upstream_cert:
        raise UserError("--upstream-cert-shared-identity goes with --upstream-cert")
    if args.upstream_cert and not (args.tls_client_ca or args.upstream_cert_shared_identity):
        raise UserError("--upstream-cert makes every client, anonymous ones included, reach the "
                        "brokers as the gateway's certificate: require client certificates "
                        "(--tls-client-ca) or accept that (--upstream-cert-shared-identity)")
