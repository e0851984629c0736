"""What the gateway holds a client to, as a broker holds its connections, and the reasons it
closes one: what it cannot follow is closed, never passed through unread.

Kafka's limits, and the gateway's own where a broker has none:

- a frame's size, read from its 4-byte prefix before anything is buffered: at most
  `max_request_bytes` (Kafka's socket.request.max.bytes, 100 MiB), and at most `PRE_AUTH_FRAME`
  (512 KiB, Kafka's SaslServerAuthenticator receive size) while the connection is not
  authenticated on a SASL listener, for raw SASL tokens, and for the requests a broker's
  authenticator serves (ApiVersions, SaslHandshake, SaslAuthenticate) on any listener;
- connections in total and per client IP (Kafka: max.connections, max.connections.per.ip,
  unlimited by default there; bounded here, since the gateway's memory is the clients');
- connections waiting in one broker port's acceptor while a connection quota delays it;
- with the PROXY protocol, a connection's header: complete within `PROXY_HEADER_TIMEOUT_S` (the
  spec asks for at least 3 s, a TCP retransmit) and at most its bounds (`proxy_protocol`);
- idle connections (Kafka's connections.max.idle.ms, 10 minutes) and requests a broker leaves
  unanswered (`request_timeout_ms`: above the longest wait a client asks of a broker, a
  JoinGroup's rebalance timeout, 5 minutes by default);
- what one mutation request may list for the gateway to decode it (`MUTATION_BYTES`,
  `MUTATION_TOPICS`): its topics are each charged, so one the gateway cannot read is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Largest frame before authentication (Kafka's DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE).
PRE_AUTH_FRAME = 512 * 1024
#: Largest request by default (Kafka's socket.request.max.bytes).
MAX_REQUEST_BYTES = 100 * 1024 * 1024
#: A mutation request larger than this, or listing more topics, is not decoded (and so closes
#: the connection: it cannot be charged). A CreateTopics of this size holds thousands of topics.
MUTATION_BYTES = 1024 * 1024
MUTATION_TOPICS = 10_000
#: Seconds a connection has to complete its PROXY protocol header (`--proxy-protocol`).
PROXY_HEADER_TIMEOUT_S = 10.0

#: Why the gateway closed a connection: the only values of the `reason` label.
CLOSE_REASONS: tuple[str, ...] = (
    "frame_size",  # a client frame with a negative size or over --max-request-bytes
    "unauthenticated_frame_size",  # over 512 KiB before authentication, or a SASL frame over it
    "bad_header",  # a request shorter than its header, or a header that does not parse
    "unauthenticated_request",  # --upstream-sasl: not ApiVersions or SASL before authenticating
    "unrewritable_request",  # its answer would carry broker addresses the gateway cannot rewrite
    "request_undecodable",  # a Produce or Fetch whose fields the gateway reads do not read as
    # Kafka reads them (a Produce's acks, a Fetch's sizes): never forwarded on a guess
    "mutation_undecodable",  # a mutation request the gateway cannot read, or listing too much
    "sasl_unfollowable",  # raw tokens of a mechanism it cannot follow; a SASL message unreadable
    "sasl_failed",  # a raw SASL exchange the broker refused
    "delegation_token",  # a SCRAM exchange for a delegation token (its owner cannot be seen)
    "broker_protocol",  # a bad frame from the broker, an answer to no request, or out of order,
    # or an answer whose addresses the gateway cannot read to rewrite
    "idle",  # nothing either way for --idle-timeout-ms
    "request_timeout",  # the broker left a request unanswered for --request-timeout-ms
    "proxy_header",  # --proxy-protocol: the connection did not start with a valid PROXY header
    "proxy_header_timeout",  # --proxy-protocol: its header was not complete in time
)

#: Outcomes of a new connection: the only values of the `outcome` label.
CONNECTION_OUTCOMES: tuple[str, ...] = (
    "accepted", "delayed", "closed",  # KIP-612: admitted, held by a delay, closed by an IP rate
    "over_limit", "over_ip_limit", "queue_full",  # refused by the gateway's own caps
)


@dataclass(frozen=True)
class Limits:
    """What the gateway holds its connections to (the flags: docs/gateway.md)."""

    max_request_bytes: int = MAX_REQUEST_BYTES
    max_connections: int = 10_000
    max_connections_per_ip: int = 1_000
    #: connections waiting in one broker port's acceptor while a connection delay holds it
    max_queued_connections: int = 1_000
    idle_timeout_ms: int = 600_000
    request_timeout_ms: int = 600_000

    def sweep_interval(self) -> float:
        """Seconds between checks of idle and overdue connections: a tenth of the shorter
        timeout, so a connection is closed at most 10% late, and at least once a second."""
        return max(0.01, min(1.0, min(self.idle_timeout_ms, self.request_timeout_ms) / 10_000.0))


class ConnectionCounts:
    """Open client connections, in total and per IP, against the caps. A connection is counted
    in the total when it opens and under its IP once that is known (behind a load balancer,
    from its PROXY header)."""

    __slots__ = ("_per_ip", "limits", "total")

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.total = 0
        self._per_ip: dict[str, int] = {}

    def open(self) -> str | None:
        """Count a new connection; or the outcome that refuses it (nothing counted)."""
        if self.total >= self.limits.max_connections:
            return "over_limit"
        self.total += 1
        return None

    def place(self, ip: str) -> str | None:
        """Count an open connection under its client's `ip`; or the outcome that refuses it."""
        n = self._per_ip.get(ip, 0)
        if n >= self.limits.max_connections_per_ip:
            return "over_ip_limit"
        self._per_ip[ip] = n + 1
        return None

    def release(self, ip: str | None) -> None:
        """A connection closed: `ip` is what it was placed under (None: never placed)."""
        if ip is not None:
            n = self._per_ip.get(ip, 0) - 1
            if n > 0:
                self._per_ip[ip] = n
            else:
                self._per_ip.pop(ip, None)
        self.total -= 1

    def of(self, ip: str) -> int:
        return self._per_ip.get(ip, 0)
