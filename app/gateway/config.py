"""What one gateway instance is given at start: where it listens, what it fronts, how it reports
and decides. Built from the settings and the command line by `app.commands.gateway`."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.engine.engine import EngineSettings
from app.gateway.limits import Limits
from app.kafka.security import KafkaSecurity
from app.signing import Signing
from app.usage.records import DEFAULT_RECORD_BYTES

#: (host, port)
Address = tuple[str, int]


@dataclass(frozen=True)
class GatewayConfig:
    upstream: tuple[Address, ...]
    listen: Address
    advertised_host: str
    kafka_bootstrap: str  # the gateway's own connection: events out, directives in
    topics: Mapping[str, str]  # event kind -> topic
    directives_topic: str
    configs_topic: str = "quota.configs"
    #: how the gateway's own connection authenticates and encrypts, and the keys the directives
    #: and configs it reads must be sealed with: the settings' (`app.commands.gateway`)
    kafka_security: KafkaSecurity = field(kw_only=True)
    signing: Signing = field(kw_only=True)
    #: the gateway's own quota decisions (`LocalQuotas`); None: directives only
    local: EngineSettings | None = None
    #: cluster scope with allocations: the local quotas enforce the allocations
    allocations: bool = False
    #: this gateway's id among the `gateways` instances in front of the cluster (None: unnamed).
    #: Named, its usage events carry it and allocations are the gateways', not the brokers'
    gateway_id: int | None = None
    #: how many named gateways share the cluster (the static split of a quota when no
    #: allocation is in force: quota / gateways)
    gateways: int = 1
    listener: str = "PLAINTEXT"
    node_port_base: int | None = None  # default: listen port + 1
    first_node_id: int | None = None  # default: the lowest node id at start
    bootstrap_node_id: int | None = None  # default: the upstream address's node, else the lowest
    max_nodes: int = 64
    flush_ms: int = 5
    aggregate: bool = False
    #: request events as columnar batches (QS_EVENT_FORMAT=columnar), else JSON
    columnar_events: bool = False
    #: bound on a usage record's value (QS_EVENT_RECORD_BYTES)
    max_record_bytes: int = DEFAULT_RECORD_BYTES
    max_in_flight: int = 5  # requests of a connection without a quota at the broker at once
    max_pending: int = 1_000_000
    directives_timeout: float = 30.0
    probe_timeout: float = 10.0
    connect_timeout: float = 10.0  # to open a client's connection to its broker
    #: the upstream listener requires SASL: nothing but ApiVersions and SASL is served (or
    #: decoded) before a connection authenticates, and its frames are held to 512 KiB until then
    upstream_sasl: bool = False
    #: every client connection starts with a PROXY protocol header naming the client (a load
    #: balancer's): its address is the one the caps, the quotas and the events see
    proxy_protocol: bool = False
    limits: Limits = field(default_factory=Limits)
    client_tls: ssl.SSLContext | None = None
    upstream_tls: ssl.SSLContext | None = None
