"""What the gateway holds a client to, as a broker holds its connections, and the reasons it
closes one: what it cannot follow is closed, never passed through unread.

Kafka's limits, and the gateway's own where a broker has none:

- a frame's size, read from its 4-byte prefix before anything is buffered: at most
  `max_request_bytes` (Kafka's socket.request.max.bytes, 100 MiB), and at most `PRE_AUTH_FRAME`
  (512 KiB, Kafka's SaslServerAuthenticator receive size) while the connection is not
  authenticated on a SASL listener, for raw SASL tokens, and for the requests a broker's
  authenticator serves (ApiVersions, SaslHandshake, SaslAuthenticate) on any listener;
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

#: Why the gateway closed a connection: the only values of the `reason` label.
CLOSE_REASONS: tuple[str, ...] = (
    "frame_size",  # a client frame with a negative size or over --max-request-bytes
    "unauthenticated_frame_size",  # over 512 KiB before authentication, or a SASL frame over it
    "bad_header",  # a request shorter than its header, or a header that does not parse
    "unauthenticated_request",  # --upstream-sasl: not ApiVersions or SASL before authenticating
    "mutation_undecodable",  # a mutation request the gateway cannot read, or listing too much
    "sasl_unfollowable",  # raw tokens of a mechanism it cannot follow; a SASL message unreadable
    "sasl_failed",  # a raw SASL exchange the broker refused
    "broker_protocol",  # a bad frame from the broker, an answer to no request, or out of order
)


@dataclass(frozen=True)
class Limits:
    """What the gateway holds its connections to (the flags: docs/gateway.md)."""

    max_request_bytes: int = MAX_REQUEST_BYTES
