"""One client connection through the gateway: a client socket, its own broker socket, and the
requests between them.

Every client connection gets its own connection to the broker it is for (SASL state is per
connection, and brokers answer in request order per connection). Requests are read frame by
frame; most are forwarded as the bytes they arrived as. Responses are matched to requests in
order (Kafka answers a connection's requests in order), changed where the gateway must (addresses,
ApiVersions, throttles), and written back in request order, including the answers the gateway
makes itself (a rejected strict mutation): such an answer waits behind the requests before it.

Throttling is Kafka's (KIP-219): the response goes out at once with `throttle_time_ms`, then the
connection is muted: no further request is read from that client until the throttle ends. The
socket is not read either (`pause_reading`), so a client that ignores the field is held back by
TCP, as it is by a broker.

What is measured per request (`UsageRecorder`, flushed by the gateway every few ms), charged
whatever the connection does next, as Kafka charges a request it handles:
- `bytes`: Produce, the request size, charged as it is forwarded (its time follows with the
  answer, an event of `count` 0); Fetch, the response size the client got (header and body,
  without the 4-byte size prefix, as Kafka's `request.sizeInBytes` and fetch response size).
  A client that leaves does not take back what the broker was sent: the broker connection stays
  until each answer it owes has arrived and been charged (`_owed`), then closes.
- `thread_time_ms`: the broker's service time as the gateway sees it: from the moment the broker
  could start the request (it was written upstream, and the previous response on that connection
  had arrived: a broker serves one request per connection at a time) to its response's arrival.
  That is an upper bound of Kafka's I/O-thread time (it includes the network to the broker and the
  broker's queues). A Fetch may wait up to `max_wait_ms` for data; the gateway cannot tell waiting
  from work, so a Fetch is charged only what exceeds `max_wait_ms` (a lower bound: usually 0).
- `network_time_ms`: 0 (the gateway's own time is not charged).
- acks=0 Produce is `exempt` (charged its bytes, not its time), as in Kafka. SASL requests on a
  SASL listener are not events (the broker's authenticator serves them, not KafkaApis).

What the gateway adds to a request's latency is its own metric (`Pending.own`): from the moment
it could read the request (the read loop starts: not while a throttle, admission, backpressure
or the broker's answer to an earlier request holds it) to its write to the broker, plus from the
broker's answer to the write of the response (not while it waits behind an earlier response).

Nothing a client sends turns that off: a request of an API the gateway does not decode is still
charged, throttled and muted; every field it reads is read as Kafka reads it (`frames`,
`bounds`), and what it cannot read that way or cannot follow at all (framing or a header it
cannot read, a Produce's acks or a Fetch's sizes, a request before authentication on a SASL
listener, raw SASL tokens it cannot count, a mutation it cannot read to charge, a request or
answer whose broker addresses it could not rewrite) closes the connection, never forwarded on a
guess, counted by reason (`limits.CLOSE_REASONS`). SASL is followed by
`Authentication`: a SASL request or raw token is served alone (nothing after it is read until it
is answered), so raw tokens are read as such only after the broker accepted a SaslHandshake v0,
and the requests after an exchange are charged to the principal it established. A SCRAM
exchange for a delegation token is answered by the gateway with an authentication error and
closed (`authentication`). When an exchange is accepted before the gateway knows the cluster (in
front of a SASL listener without the node flags), it asks for the brokers on that connection,
an internal Metadata request answered before anything the client sends after it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app.gateway import apis, messages
from app.gateway.authentication import (
    ACCEPTED,
    DELEGATION_TOKEN,
    REFUSED,
    UNFOLLOWABLE,
    Authentication,
)
from app.gateway.frames import (
    SIZE,
    FrameError,
    FrameReader,
    ReadBuffers,
    Incomplete,
    RequestHeader,
    correlation_id,
    request_header,
)
from app.gateway.limits import (
    MUTATION_BYTES,
    MUTATION_TOPICS,
    PRE_AUTH_FRAME,
    PROXY_HEADER_TIMEOUT_S,
)
from app.enforcement.local import LocalQuotas
from app.enforcement.mutations import MutationQuota
from app.enforcement.requests import RequestQuota
from app.gateway.config import GatewayConfig
from app.gateway.messages import MessageError, Node
from app.gateway.metrics import GatewayMetrics
from app.gateway.mutations import MutationContext
from app.gateway.proxy_protocol import ProxyHeaderError, ProxyHeaderReader
from app.usage.recorder import UsageRecorder

logger = logging.getLogger(__name__)

#: Close reasons that are the broker's doing (logged as warnings; the clients' as debug).
_BROKER_FAULTS = frozenset({"broker_protocol", "request_timeout"})

#: What became of a request: FORWARDED to the broker, answered LOCALly by the gateway, HELD
#: until a lookup answers, an INTERNAL lookup of the gateway's own, or a raw SASL TOKEN.
FORWARDED, LOCAL, HELD, INTERNAL, TOKEN = 0, 1, 2, 3, 4
#: The header a raw SASL token is filed under (it has none).
RAW_TOKEN = RequestHeader(-1, 0, 0, "", -1)

#: What a client authenticating with a delegation token is told.
DELEGATION_TOKEN_REFUSED = ("Delegation tokens cannot be used through the quota-streams gateway: "
                            "authenticate as the token's owner")

#: Client bytes read ahead of the request being served, at most (plus one frame).
READ_AHEAD = 1 << 20
#: Bytes of a frame still arriving whose header is checked before the rest (`_refuse_early`):
#: the longest client id and a tagged-field section's head fit.
HEAD_PEEK = 64 * 1024
#: A frame larger than this is written after its size prefix rather than joined to it (a copy).
JOIN_BELOW = 64 * 1024


def _send(transport: asyncio.WriteTransport, payload: bytes) -> None:
    """Write one frame: its size prefix, then the payload."""
    if len(payload) < JOIN_BELOW:
        transport.write(SIZE.pack(len(payload)) + payload)
    else:
        transport.write(SIZE.pack(len(payload)))
        transport.write(payload)


@dataclass(slots=True)
class Pending:
    """A request waiting for its response to be written back (in request order).

    `own` adds up the time the gateway itself spends on it (`latency_seconds`): from when it
    could read the request to its write to the broker, and from the broker's answer to the write
    of the response; `since` is when the stretch being timed began. Waiting for the broker (its
    answer, or an earlier request's), for admission or for a throttle is not the gateway's.
    """

    kind: int  # FORWARDED, LOCAL, HELD, INTERNAL or TOKEN
    header: RequestHeader
    size: int  # request bytes, without the size prefix
    sent: float = 0.0  # the gateway's clock when written to the broker
    payload: bytes | None = None  # the response to write, once ready
    ready: bool = False
    context: Any = None  # what the response handler needs of the request
    since: float = 0.0
    own: float = 0.0
    #: the throttle decided as it was forwarded: a Produce's bytes are charged then
    throttle_ms: int = 0


class _Side(asyncio.BufferedProtocol):
    """Adapts asyncio's callbacks for one socket to the `Session` methods. Its reads go where
    the side's `FrameReader` says (`get_buffer`): a large frame's bytes straight into its own
    buffer."""

    def __init__(self, session: Session, upstream: bool) -> None:
        self.session = session
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.upstream:
            self.session.upstream_made(transport)  # type: ignore[arg-type]
        else:
            self.session.client_made(transport)  # type: ignore[arg-type]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.session.read_buffer(self.upstream)

    def buffer_updated(self, nbytes: int) -> None:
        if self.upstream:
            self.session.upstream_read(nbytes)
        else:
            self.session.client_read(nbytes)

    def connection_lost(self, exc: Exception | None) -> None:
        self.session.lost(self.upstream, exc)

    def pause_writing(self) -> None:
        self.session.write_paused(self.upstream, True)

    def resume_writing(self) -> None:
        self.session.write_paused(self.upstream, False)


class Host(Protocol):
    """What a `Session` needs of the gateway instance it belongs to (`app.gateway.server.Gateway`):
    its configuration and clocks, the quota decisions and usage it shares, its metrics, and the
    connection bookkeeping a session reports to."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    def now_ms(self) -> int: ...
    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def listener(self) -> str: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def local(self) -> LocalQuotas | None: ...
    @property
    def usage(self) -> UsageRecorder: ...
    @property
    def request_quota(self) -> RequestQuota: ...
    @property
    def mutation_quota(self) -> MutationQuota: ...
    # the brokers and their addresses through this gateway
    @property
    def metadata_version(self) -> int: ...
    @property
    def cluster_known(self) -> bool: ...
    def learn(self, nodes: list[Node]) -> asyncio.Future[None] | None: ...
    def client_address(self, node_id: int) -> tuple[str, int] | None: ...
    # a session's connections
    @property
    def read_buffers(self) -> ReadBuffers: ...
    @property
    def draining(self) -> bool: ...
    def opened(self, session: Session) -> bool: ...
    def admit(self, session: Session) -> None: ...
    def connect(self, session: Session) -> None: ...
    def lingering(self, session: Session) -> None: ...
    def client_closed(self, session: Session) -> None: ...
    def forget(self, session: Session) -> None: ...


class Session:
    """The state of one client connection through the gateway."""

    def __init__(self, core: Host, node_id: int, bootstrap: bool = False) -> None:
        self.core = core
        self.node_id = node_id
        self.bootstrap = bootstrap  # came in on the bootstrap port: goes to the upstream address
        self.client: asyncio.Transport | None = None
        self.broker: asyncio.Transport | None = None
        self.ip = ""
        self.placed = False  # counted under `ip` (`Gateway.admit`)
        self._client_gone = False  # the client's socket is closed
        #: the PROXY header still to be read before anything else (`config.proxy_protocol`)
        self._proxy = ProxyHeaderReader() if core.config.proxy_protocol else None
        self.auth = Authentication(core.config.upstream_sasl)
        self.closed = False
        self.connecting: asyncio.Future[None] | None = None  # the broker connection being made
        self.opened_at = core.clock()
        self.active = self.opened_at  # when bytes last came from either side
        self._max_request = core.config.limits.max_request_bytes
        self._from_client = FrameReader(self.auth.frame_limit(self._max_request),
                                        held_keys=apis.AUTHENTICATOR_APIS,
                                        held_frame=PRE_AUTH_FRAME, buffers=core.read_buffers)
        self._from_broker = FrameReader(buffers=core.read_buffers, eager=True)
        self._sasl_waiting = 0  # SASL requests and raw tokens at the broker (see _sasl_request)
        self._order: deque[Pending] = deque()  # every request, in order, until its response is written
        self._awaiting: deque[Pending] = deque()  # forwarded/internal, waiting for the broker
        self._muted_until = 0  # epoch ms
        self._unmute: asyncio.TimerHandle | None = None
        self._pauses: set[str] = set()  # why client reading is paused (see _pause)
        self._last_response = 0.0  # the clock at the previous response from the broker
        self._read_at = 0.0  # the clock when the read loop last started: requests readable
        self._reading = False  # inside _read_requests (a flush from within must not re-enter)
        self._client_id = ""  # of the last request: what decides the in-flight limit
        self._limited = False
        self._limited_as_of: tuple[int, str, str] | None = None
        self._internal_ids = 0
        #: the first request, read before its broker connection was made (`_read_loop`)
        self._first: tuple[RequestHeader, bytes] | None = None

    # ------------------------------------------------------------------------- lifecycle

    def client_protocol(self) -> asyncio.BufferedProtocol:
        return _Side(self, upstream=False)

    def broker_protocol(self) -> asyncio.BufferedProtocol:
        return _Side(self, upstream=True)

    def client_made(self, transport: asyncio.Transport) -> None:
        self.client = transport
        peer = transport.get_extra_info("peername")
        self.ip = str(peer[0]) if peer else ""
        if not self.core.opened(self):
            return
        if self._proxy is None:
            self._pause("accept")  # until admitted (connection quotas)
            self.core.admit(self)
        # else its first bytes are read: the PROXY header names the client to admit

    @property
    def buffered(self) -> int:
        """Client bytes read and not yet handled: at most the frame limit of the connection's
        state or READ_AHEAD, whichever is larger, plus one socket read (a PROXY header's
        bytes, before it)."""
        proxy = 0 if self._proxy is None else self._proxy.buffered
        return self._from_client.buffered + proxy

    @property
    def user(self) -> str:
        """The principal this connection's usage is charged to."""
        return self.auth.user

    def upstream_made(self, transport: asyncio.Transport) -> None:
        if self.closed:  # the client left while its broker connection was being made
            transport.close()
            return
        self.broker = transport

    def admitted(self) -> None:
        """Within the connection quotas: start reading the client. Its broker connection is
        made for its first request (`_read_loop`)."""
        self._resume("accept")

    def connected(self) -> None:
        """The broker connection is up: its first request goes on."""
        self._resume("upstream")

    def close(self, reason: str | None = None, detail: str = "") -> None:
        """Close both sides. `reason` (one of `limits.CLOSE_REASONS`): the gateway refuses what
        the connection did, counted; None: a side went away, or the gateway stops."""
        if self.closed:
            return
        self.closed = True
        if reason is not None:
            self.core.metrics.closed(reason)
            logger.log(logging.WARNING if reason in _BROKER_FAULTS else logging.DEBUG,
                       "closing the connection from %s to broker %d (%s): %s", self.ip,
                       self.node_id, reason, detail)
        if self._unmute is not None:
            self._unmute.cancel()
        if self.connecting is not None:
            self.connecting.cancel()
        client = self.client
        if self.core.draining and client is not None and not self._client_gone:
            self.core.lingering(self)  # until the client's socket is closed (`lost`)
            if client.can_write_eof():
                # a lingering close: the answers, then a FIN; what the client still sends is
                # read and dropped until it closes too (closed with unread bytes, the socket
                # would be reset, and answers not yet delivered lost)
                client.write_eof()
                client = None
        for transport in (client, self.broker):
            if transport is not None:
                transport.close()
        self.core.forget(self)

    def drain(self) -> None:
        """The gateway stops: handle no further request (what the client sends from now on is
        read and dropped); close once every answer owed is written (at once if none is)."""
        self._pauses.add("drain")
        if self.client is not None and not self.closed:
            self.client.resume_reading()
        if not self._order:
            self.close()

    def abort(self) -> None:
        """Close the client's socket without writing what it still holds."""
        if self.client is not None:
            self.client.abort()

    def expired(self, now: float, idle_s: float, timeout_s: float) -> str | None:
        """Why the gateway closes this connection at `now` (its clock, seconds), if it does: the
        broker left a request unanswered for `timeout_s`, or nothing came either way for
        `idle_s` while nothing was outstanding (a muted connection waits for its throttle)."""
        if self._proxy is not None:
            return "proxy_header_timeout" if now - self.opened_at > PROXY_HEADER_TIMEOUT_S else None
        if self._awaiting:
            return "request_timeout" if now - self._awaiting[0].sent > timeout_s else None
        if self._order or self.muted:
            return None
        return "idle" if now - self.active > idle_s else None

    def lost(self, upstream: bool, exc: Exception | None) -> None:
        if not upstream:
            self._client_gone = True
            self.core.client_closed(self)
            if self._owed():
                return  # the broker connection stays until the answers it owes are charged
        if upstream and not self.closed and self.client is not None:
            self._flush()  # answers that are ready still go out
        self.close()

    def _owed(self) -> bool:
        """Whether the broker still owes answers to requests it was sent: a client that leaves
        does not take them back (the broker serves them, and Kafka charges them whatever the
        connection does), so they are charged as they come; then the connection closes, or at
        the request timeout (`expired`)."""
        return not self.closed and self.broker is not None and bool(self._awaiting)

    def write_paused(self, upstream: bool, paused: bool) -> None:
        """Backpressure: a side that cannot keep up stops the other side's reading."""
        if upstream:  # the broker socket is full: stop reading requests
            (self._pause if paused else self._resume)("broker")
        elif self.broker is not None:  # the client is slow: stop reading responses
            (self.broker.pause_reading if paused else self.broker.resume_reading)()

    def _pause(self, why: str) -> None:
        """Stop reading the client's socket, for `why`: "accept" (not admitted yet), "upstream"
        (its broker connection is being made), "mute" (a throttle), "broker" (its socket is
        full), "backlog" (READ_AHEAD bytes are waiting), "drain" (the gateway stops: no request
        is handled, the socket is still read, `drain`)."""
        if not self._pauses and self.client is not None and not self.closed:
            self.client.pause_reading()
        self._pauses.add(why)

    def _resume(self, why: str) -> None:
        if why not in self._pauses:
            return
        self._pauses.discard(why)
        if not self._pauses and self.client is not None and not self.closed:
            self.client.resume_reading()
        if why != "backlog":
            self._read_requests()

    # ------------------------------------------------------------------------- requests

    def read_buffer(self, upstream: bool) -> memoryview:
        """Where the next read of the broker's (`upstream`) or the client's socket goes."""
        return (self._from_broker if upstream else self._from_client).get_buffer()

    def client_read(self, nbytes: int) -> None:
        """`nbytes` of the client's were read into `read_buffer(False)`."""
        if self.closed or "drain" in self._pauses or self._proxy is not None:
            self.client_data(self._from_client.unread(nbytes))
            return
        self.active = self.core.clock()
        self._from_client.taken(nbytes)
        self._read_requests()

    def client_data(self, data: bytes) -> None:
        if self.closed or "drain" in self._pauses:
            return
        self.active = self.core.clock()
        if self._proxy is not None:
            self._proxy_header(data)
            return
        self._from_client.feed(data)
        self._read_requests()

    def _proxy_header(self, data: bytes) -> None:
        """The connection's first bytes, until its PROXY header names the client: then it is
        admitted as that client, and what came after the header is its first Kafka bytes."""
        assert self._proxy is not None
        try:
            done = self._proxy.feed(data)
        except ProxyHeaderError as exc:
            self.close("proxy_header", str(exc))
            return
        if done is None:
            return
        header, rest = done
        self._proxy = None
        if header.source is not None:
            self.ip = header.source[0]
        self._pause("accept")
        self._from_client.feed(rest)  # read once admitted
        self.core.admit(self)

    def _read_requests(self) -> None:
        """Handle the requests read so far, as a broker does: one at a time per connection (the
        next is read once the previous response is out: Kafka mutes a channel while a request is
        in flight), none while admission, backpressure or a throttle (KIP-219) hold the client."""
        if self._reading:
            return  # called back from inside the loop (a local answer was flushed)
        self._reading = True
        try:
            self._read_loop()
        finally:
            self._reading = False

    def _read_loop(self) -> None:
        self._read_at = self.core.clock()  # what is complete now is readable from now
        while not self.closed:
            if self._client_gone or self._pauses - {"backlog"} or \
                    len(self._order) >= self._in_flight():
                break  # a client gone: what it sent and the broker never saw is not served
            if self._muted_until and self.core.now_ms() < self._muted_until:
                self._mute_until(self._muted_until)
                break
            if self._first is not None:
                header, payload = self._first
                self._first = None
                self._request(header, payload)
                continue
            payload = self._next_frame()
            if payload is None:
                self._refuse_early()
                break
            if self.auth.raw:
                self._token(payload)
                continue
            try:
                header = request_header(payload)
            except FrameError as exc:
                self.close("bad_header", str(exc))
                return
            if self._refused(header):
                return
            if self.broker is None:
                # the broker sees a connection only once it sent a well-formed request: junk,
                # absurd sizes and silence are refused here and cost the broker nothing
                self._first = (header, payload)
                self._pause("upstream")
                self.core.connect(self)
                continue
            self._request(header, payload)
        if self.closed:
            return
        # read ahead at most READ_AHEAD bytes: a pipelining client waits in its own socket
        reader = self._from_client
        try:
            backlog = reader.buffered >= READ_AHEAD and reader.complete()
        except FrameError as exc:
            self._refuse_frame(exc)
            return
        (self._pause if backlog else self._resume)("backlog")

    def _next_frame(self) -> bytes | None:
        """The client's next frame, held to the limit of the connection's state (its prefix is
        checked before anything of it is kept); None when there is none yet, or it was refused."""
        reader = self._from_client
        reader.max_frame = self.auth.frame_limit(self._max_request)
        try:
            return reader.next()
        except FrameError as exc:
            self._refuse_frame(exc)
            return None

    def _refuse_early(self) -> None:
        """A frame still arriving whose header, as far as it came, no request of its size can
        have (a client id or a tagged field past its end, more tagged fields than it holds):
        refused now, before its megabytes are read and held."""
        head = None if self.closed or self.auth.raw else self._from_client.head(HEAD_PEEK)
        if head is None:
            return
        size, data = head
        try:
            request_header(data, end=size)
        except Incomplete:
            return  # nothing wrong so far
        except FrameError as exc:
            self.close("bad_header", str(exc))

    def _refuse_frame(self, exc: FrameError) -> None:
        fits = exc.size is not None and 0 <= exc.size <= self._max_request
        self.close("unauthenticated_frame_size" if fits else "frame_size", str(exc))

    def _in_flight(self) -> int:
        """Requests this connection may have at the broker at once: one for a client with a
        quota, as a broker reads a connection's next request only once the last is answered
        (so a throttle holds back the very next request); up to `max_in_flight` for others,
        whose pipelining then costs no throughput. A SASL request is served alone."""
        if self._sasl_waiting:
            return 1
        local = self.core.local
        if local is None:
            return self.core.max_in_flight
        version = local.configs_version
        if self._limited_as_of != (version, self.user, self._client_id):
            self._limited_as_of = (version, self.user, self._client_id)
            self._limited = local.limited(self.user, self._client_id)
        return 1 if self._limited else self.core.max_in_flight

    def _refused(self, header: RequestHeader) -> bool:
        """Close the connection for a request it may not send now, or that the gateway could
        not rewrite: whether it did."""
        key, version = header.api_key, header.api_version
        if not self.auth.allows(key):
            self.close("unauthenticated_request", f"{apis.api_name(key)} before authenticating")
            return True
        if not apis.rewritable(key, version):
            self.close("unrewritable_request", f"{apis.api_name(key)} v{version}")
            return True
        return False

    def _request(self, header: RequestHeader, payload: bytes) -> None:
        core, key, version = self.core, header.api_key, header.api_version
        core.metrics.request(key)
        self._client_id = header.client_id
        if key in apis.SASL_APIS:
            self._sasl_request(header, payload)
            return
        if key in apis.MUTATION_APIS:
            self._mutation_request(header, payload)
            return
        context: Any = None
        throttle = 0
        try:
            if key == apis.PRODUCE:
                if messages.produce_acks(payload, version, header.body) == 0:
                    self._forward_without_response(header, payload)
                    return
                throttle = self._charge_produce(header, len(payload), exempt=False)
            elif key == apis.FETCH:
                context = messages.fetch_request(payload, version, header.body)
                cap = None if core.local is None else core.local.fetch_cap(
                    self.node_id, self.user, header.client_id)
                if cap is not None and context.max_bytes > cap:
                    payload, context = messages.cap_fetch(payload, context, cap)
        except MessageError as exc:
            # the broker acts on these fields (whether it answers, how much it sends): a request
            # whose fields the gateway cannot read as Kafka reads them is never forwarded
            self.close("request_undecodable", f"{apis.api_name(key)} v{version}: {exc}")
            return
        self._forward(header, payload, context, throttle)

    def _sasl_request(self, header: RequestHeader, payload: bytes) -> None:
        """A SASL request is served alone: nothing after it is read until the broker answered
        it. So the bytes after a SaslHandshake v0 are read as raw tokens only once the broker
        accepted it, and the requests after an exchange are read (and charged) knowing the
        principal it established, however far the client pipelined."""
        key, version = header.api_key, header.api_version
        try:
            if key == apis.SASL_HANDSHAKE:
                self.auth.handshake(version, messages.sasl_mechanism(payload, version, header.body))
            elif self.auth.client_token(messages.sasl_auth_bytes(
                    payload, version, header.body)) == DELEGATION_TOKEN:
                self._refuse_token(header)
                return
        except MessageError as exc:
            self.close("sasl_unfollowable", f"{apis.api_name(key)} v{version}: {exc}")
            return
        self._sasl_waiting += 1
        self._forward(header, payload, None)

    def _refuse_token(self, header: RequestHeader) -> None:
        """A delegation token's exchange: refused as a broker refuses one (an authentication
        error, then the connection closes), without reaching the broker."""
        pending = Pending(LOCAL, header, 0, ready=True, payload=messages.sasl_authenticate_error(
            header.api_version, header.correlation_id, DELEGATION_TOKEN_REFUSED),
            since=self._read_at)
        self._order.append(pending)
        self._write_ready()
        self.close("delegation_token", "SCRAM with tokenauth=true")

    def _token(self, token: bytes) -> None:
        """A raw SASL token: to the broker as it came; the next frame is read once the broker's
        token answered it (a raw exchange is one token each way at a time)."""
        assert self.broker is not None
        if self.auth.client_token(token) == DELEGATION_TOKEN:
            self.close("delegation_token", "raw SCRAM with tokenauth=true")
            return
        pending = Pending(TOKEN, RAW_TOKEN, len(token))
        self._order.append(pending)
        self._awaiting.append(pending)
        self._sasl_waiting += 1
        _send(self.broker, token)
        pending.sent = self.core.clock()

    def _mutation_request(self, header: RequestHeader, payload: bytes) -> None:
        """A mutation request is charged per topic, so one the gateway cannot read (or that
        lists more than it reads: `limits.MUTATION_BYTES`, `MUTATION_TOPICS`) is refused."""
        key, version = header.api_key, header.api_version
        try:
            count = messages.mutation_topic_count(key, version, payload, header.body)
            if len(payload) > MUTATION_BYTES or not 0 <= count <= MUTATION_TOPICS:
                raise MessageError(f"{len(payload)} bytes, {count} topics")
            request = messages.mutation_request(key, version, payload, header.body)
        except MessageError as exc:
            self.close("mutation_undecodable", f"{apis.api_name(key)} v{version}: {exc}")
            return
        self._mutation(header, MutationContext(key, version, request, payload, header.body))

    def _forward(self, header: RequestHeader, payload: bytes, context: Any,
                 throttle_ms: int = 0) -> None:
        assert self.broker is not None
        pending = Pending(FORWARDED, header, len(payload), context=context, since=self._read_at,
                          throttle_ms=throttle_ms)
        self._order.append(pending)
        self._awaiting.append(pending)
        _send(self.broker, payload)
        self._sent(pending)

    def _sent(self, pending: Pending) -> None:
        """`pending` was just written to the broker: the broker's time starts."""
        pending.sent = now = self.core.clock()
        pending.own += now - pending.since

    def _forward_without_response(self, header: RequestHeader, payload: bytes) -> None:
        """acks=0 Produce: no response comes, so none is awaited; charged its bytes, exempt from
        the request quota, and the channel is still muted by the byte-rate quota (Kafka)."""
        assert self.broker is not None
        _send(self.broker, payload)
        core = self.core
        core.metrics.latency(apis.PRODUCE, core.clock() - self._read_at)
        ms = self._charge_produce(header, len(payload), exempt=True)
        if ms > 0:
            core.metrics.throttled(apis.PRODUCE, ms)
            self._mute_until(core.now_ms() + ms)

    def _charge_produce(self, header: RequestHeader, nbytes: int, exempt: bool) -> int:
        """A Produce's bytes, charged as it is forwarded: Kafka records them whatever the
        connection does next, so a client that leaves before the answer has paid. Its time is
        charged when the answer comes (`_finish`), unless `exempt` (acks=0). Returns the
        throttle its bytes bring, which its answer carries."""
        if not self.auth.charged(apis.PRODUCE):
            return 0
        core, now = self.core, self.core.now_ms()
        ms = core.request_quota.throttle(self.node_id, now, core.listener, self.user,
                                         header.client_id, self.ip, "Produce", nbytes, 0.0,
                                         exempt=exempt).ms
        core.usage.request(self.node_id, now, core.listener, self.user, header.client_id, self.ip,
                           "Produce", nbytes, 0.0, 0.0, exempt=exempt, throttle_ms=ms)
        return ms

    def _mutation(self, header: RequestHeader, context: MutationContext) -> None:
        """Plan the request's topics against the mutation quota (after looking up the partition
        counts it charges, if any), then forward the admitted ones and answer the rest."""
        pending = Pending(HELD, header, len(context.payload), context=context, since=self._read_at)
        self._order.append(pending)
        if not (context.needs_lookup and self._lookup_partitions(pending)):
            self._decide(pending)  # nothing to look up, or no lookup possible: charge what is known

    def _decide(self, pending: Pending) -> None:
        if self._client_gone:
            return  # its client left while it was held: it never reaches the broker
        context: MutationContext = pending.context
        core, header, now = self.core, pending.header, self.core.now_ms()
        request = context.request
        plan = context.plan = core.mutation_quota.plan(
            self.node_id, now, self.user, header.client_id, request.api, header.api_version,
            context.charged(), request.validate_only)
        context.throttle_until = now + plan.throttle_ms
        if plan.rejected:
            core.metrics.rejected(header.api_key, len(plan.rejected))
        if len(plan.rejected) == len(context.request.topics) and context.request.topics:
            pending.kind = LOCAL
            pending.payload = messages.reject_mutation(header.api_key, header.api_version,
                                                       header.correlation_id, context.request,
                                                       plan.reject_ms)
            pending.ready = True
            self._mute_until(now + plan.reject_ms)
            self._flush()
            return
        try:
            payload = context.forwarded_payload()
        except MessageError:
            payload, context.plan = context.payload, None
        pending.kind = FORWARDED
        self._awaiting.append(pending)
        assert self.broker is not None
        _send(self.broker, payload)
        self._sent(pending)

    def _lookup_partitions(self, held: Pending) -> bool:
        """An internal Metadata request on this connection, answered before the mutation (the
        broker answers in order) and never shown to the client. False if it cannot be made."""
        context: MutationContext = held.context
        version = self.core.metadata_version
        names = [t.name for t in context.request.topics if t.name]
        ids = [t.topic_id for t in context.request.topics if not t.name and t.topic_id]
        self._internal_ids -= 1
        try:
            payload = messages.metadata_request(version, self._internal_ids, "quota-streams-gateway",
                                                names, ids if version >= 10 else [])
        except MessageError:
            return False
        lookup = RequestHeader(apis.METADATA, version, self._internal_ids, "", -1)
        internal = Pending(INTERNAL, lookup, len(payload), context=held)
        self._awaiting.append(internal)
        assert self.broker is not None
        _send(self.broker, payload)
        self._sent(internal)
        held.own += internal.sent - held.since  # the broker's time, until the lookup's answer
        return True

    # ------------------------------------------------------------------------- responses

    def upstream_read(self, nbytes: int) -> None:
        """`nbytes` of the broker's were read into `read_buffer(True)`."""
        if self.closed:
            self._from_broker.unread(nbytes)
            return
        self.active = self.core.clock()
        self._from_broker.taken(nbytes)
        self._responses()

    def upstream_data(self, data: bytes) -> None:
        if self.closed:
            return
        self.active = self.core.clock()
        self._from_broker.feed(data)
        self._responses()

    def _responses(self) -> None:
        """Answer each complete response read from the broker."""
        while not self.closed:
            try:
                payload = self._from_broker.next()
            except FrameError as exc:
                self.close("broker_protocol", f"a bad frame ({exc})")
                return
            if payload is None:
                return
            if not self._awaiting:
                self.close("broker_protocol", "a response to no request")
                return
            pending = self._awaiting.popleft()
            if pending.kind != TOKEN and (len(payload) < 4 or
                                          correlation_id(payload) != pending.header.correlation_id):
                self.close("broker_protocol", "a response out of order")
                return
            self._response(pending, payload)
            if self._client_gone and not self._awaiting:
                self.close()  # every answer owed to the client that left was charged

    def _response(self, pending: Pending, payload: bytes) -> None:
        arrived = self.core.clock()
        service = (arrived - max(pending.sent, self._last_response)) * 1000.0
        self._last_response = pending.since = arrived
        if pending.kind == INTERNAL:
            self._lookup_answer(pending, payload)
            return
        if pending.kind == TOKEN:
            self._token_answer(pending, payload)
            return
        core, header = self.core, pending.header
        key, version = header.api_key, header.api_version
        if key in apis.SASL_APIS and not self._sasl_answer(header, payload):
            return
        now = core.now_ms()
        unrewritten = ""  # why an answer that may name brokers could not be rewritten
        try:
            out, wait = self._rewrite(pending, payload)
        except MessageError as exc:
            if key in apis.ADDRESSES:  # its addresses cannot be rewritten: never passed on
                unrewritten = f"a {apis.api_name(key)} v{version} answer: {exc}"
            else:
                core.metrics.undecoded(key)
                logger.debug("passing a %s v%d response through: %s", apis.api_name(key),
                             version, exc)
            out, wait = payload, None
        if wait is not None:  # new brokers to listen for first; the response waits in order
            wait.add_done_callback(lambda _f: self._finish(pending, out, now, service))
            return
        self._finish(pending, out, now, service, unrewritten)

    def _rewrite(self, pending: Pending, payload: bytes) -> tuple[bytes, asyncio.Future[None] | None]:
        """Addresses and versions a client must see through the gateway."""
        key, version = pending.header.api_key, pending.header.api_version
        core = self.core
        if key == apis.METADATA:  # the brokers learned first: a new one gets its port, then
            # the answer names it (a broker the gateway cannot front is left out)
            wait = core.learn(messages.metadata_brokers(payload, version)[0])
            return messages.rewrite_metadata(payload, version, core.client_address)[0], wait
        if key == apis.API_VERSIONS:
            return messages.narrow_api_versions(payload, version), None
        if key == apis.FIND_COORDINATOR:
            return messages.rewrite_find_coordinator(payload, version, core.client_address) or payload, None
        if key == apis.DESCRIBE_CLUSTER:
            wait = core.learn(messages.describe_cluster_brokers(payload, version))
            out = messages.rewrite_describe_cluster(payload, version, core.client_address)
            return out or payload, wait
        if key == apis.DESCRIBE_CONFIGS:
            return messages.hide_config_addresses(payload, version) or payload, None
        return payload, None

    def _sasl_answer(self, header: RequestHeader, payload: bytes) -> bool:
        """Follow the exchange with the broker's answer to a SASL request; False when that
        closed the connection (an answer it cannot read, raw tokens it cannot follow)."""
        key, version = header.api_key, header.api_version
        self._sasl_waiting -= 1
        try:
            if key == apis.SASL_HANDSHAKE:
                step = self.auth.handshake_answered(messages.sasl_handshake_accepted(payload, version))
            else:
                accepted, token = messages.sasl_authenticate_answer(payload, version)
                step = self.auth.server_token(token, error=not accepted)
        except MessageError as exc:
            self.close("sasl_unfollowable", f"the broker's {apis.api_name(key)} answer: {exc}")
            return False
        if step == UNFOLLOWABLE:
            self.close("sasl_unfollowable", "raw SASL tokens of a mechanism it cannot follow")
            return False
        if step == ACCEPTED:
            self._learn_cluster()
        return True

    def _token_answer(self, pending: Pending, token: bytes) -> None:
        """The broker's raw token: to the client; the exchange goes on, or Kafka framing resumes
        (accepted), or the connection closes (refused, as the broker does)."""
        self._sasl_waiting -= 1
        step = self.auth.server_token(token)
        pending.payload, pending.ready = token, True
        if step == REFUSED:
            self._write_ready()
            self.close("sasl_failed", "the broker refused the raw SASL exchange")
            return
        if step == ACCEPTED:
            self._learn_cluster()
        self._flush()

    def _finish(self, pending: Pending, payload: bytes, now: int, service_ms: float,
                unrewritten: str = "") -> None:
        """Charge the request, apply the throttle in force, queue the response in order. The
        answer is charged whatever became of the connection meanwhile (the broker served the
        request); only a client still there is answered and muted. `unrewritten`: why this
        answer names brokers the gateway could not rewrite (charged, never passed on)."""
        core, header = self.core, pending.header
        key, version, client_id = header.api_key, header.api_version, header.client_id
        context = pending.context
        fetch = context if isinstance(context, messages.FetchRequestInfo) else None
        mutation = context if isinstance(context, MutationContext) else None
        if fetch is not None and fetch.capped:  # only what the client can use is charged
            payload = self._whole_batches(payload, version)
        charged = self.auth.charged(key)
        throttle, empty = 0, False
        thread_ms = max(0.0, service_ms - fetch.max_wait_ms) if fetch else service_ms
        nbytes = len(payload) if key == apis.FETCH else 0
        # a Produce was counted, and its bytes charged, as it was forwarded: its answer adds its
        # time to that request (count 0)
        count = 0 if key == apis.PRODUCE else 1
        name = ""
        if charged:
            name = apis.api_name(key)
            throttle, empty = core.request_quota.throttle(self.node_id, now, core.listener,
                                                          self.user, client_id, self.ip, name,
                                                          nbytes, thread_ms, fetch is not None,
                                                          count=count)
        decided = throttle  # this answer's own, as its usage reports it
        throttle = max(throttle, pending.throttle_ms)
        if mutation is not None and mutation.plan is not None:
            throttle = max(throttle, mutation.throttle_until - now,
                           mutation.plan.reject_ms if mutation.plan.rejected else 0)
            self._charge_mutations(header, payload, mutation, now)
        try:
            if mutation is not None and mutation.plan is not None and mutation.plan.rejected:
                payload = messages.add_rejections(key, version, payload, mutation.request,
                                                  mutation.plan.rejected, throttle)
            if empty:
                payload = messages.empty_fetch_response(payload, version, throttle, fetch.incremental)
            else:
                payload = messages.patch_response(key, version, payload, throttle,
                                                  core.client_address) or payload
        except MessageError as exc:
            if (key == apis.PRODUCE and version >= 10) or (key == apis.FETCH and version >= 16):
                unrewritten = f"a {apis.api_name(key)} v{version} answer: {exc}"  # KIP-951 leaders
            core.metrics.undecoded(key)
            logger.debug("could not patch a %s v%d response: %s", apis.api_name(key), version, exc)
        if charged:
            if fetch is not None:
                nbytes = len(payload)  # what the client got: an empty response if throttled
            core.usage.request(self.node_id, now, core.listener, self.user, client_id, self.ip,
                               name, nbytes, round(thread_ms, 3), 0.0, count=count,
                               throttle_ms=decided)
        if self.closed or self._client_gone:
            return  # charged; nobody to answer
        if unrewritten:  # charged, but never passed on
            self.close("broker_protocol", unrewritten)
            return
        if throttle > 0:
            core.metrics.throttled(key, throttle)
            self._mute_until(now + throttle)
        core.metrics.response(key, len(payload))
        pending.payload = payload
        pending.ready = True
        self._flush()

    def _whole_batches(self, payload: bytes, version: int) -> bytes:
        """A capped Fetch's answer without the partial record batches the broker cut at its
        `max_bytes` (`messages.whole_batches`); as it came if it cannot be read."""
        try:
            return messages.whole_batches(payload, version) or payload
        except MessageError as exc:
            self.core.metrics.undecoded(apis.FETCH)
            logger.debug("passing a Fetch v%d answer uncut: %s", version, exc)
            return payload

    def _charge_mutations(self, header: RequestHeader, payload: bytes, context: MutationContext,
                          now: int) -> None:
        """One mutation event per topic the broker admitted, with the partitions it charges."""
        try:
            admitted = context.admitted_partitions(payload)
        except MessageError:
            return
        self.core.mutation_quota.admitted(self.node_id, now, self.user, header.client_id,
                                          context.request.api, header.api_version, admitted,
                                          context.request.validate_only)

    def _learn_cluster(self) -> None:
        """Just authenticated, and the gateway does not know the cluster yet: an internal
        Metadata request (no topics) for its brokers, answered before the client's next."""
        core = self.core
        if core.cluster_known:
            return
        version = core.metadata_version
        self._internal_ids -= 1
        payload = messages.metadata_request(version, self._internal_ids, "quota-streams-gateway", [])
        lookup = RequestHeader(apis.METADATA, version, self._internal_ids, "", -1)
        internal = Pending(INTERNAL, lookup, len(payload))
        self._awaiting.append(internal)
        assert self.broker is not None
        _send(self.broker, payload)
        internal.sent = self.core.clock()

    def _cluster_answer(self, internal: Pending, payload: bytes) -> None:
        try:
            nodes, _start, _end = messages.metadata_brokers(payload, internal.header.api_version)
        except MessageError as exc:
            self.close("broker_protocol", f"the brokers' Metadata answer: {exc}")
            return
        if not nodes:
            self.close("broker_protocol", "a Metadata answer naming no brokers")
            return
        self.core.learn(nodes)  # ports are bound before any answer naming them goes out

    def _lookup_answer(self, internal: Pending, payload: bytes) -> None:
        if internal.context is None:
            self._cluster_answer(internal, payload)
            return
        held: Pending = internal.context
        held.since = internal.since  # the gateway's again, from the lookup's answer
        try:
            held.context.learn(payload, internal.header.api_version)
        except MessageError as exc:
            logger.debug("partition lookup failed: %s", exc)
        self._decide(held)

    def _flush(self) -> None:
        """Write every response that is ready, in request order; then read the next request, or
        close when the gateway drains and nothing more is owed."""
        if self._write_ready():
            if self.core.draining and not self._order:
                self.close()
                return
            self._read_requests()

    def _write_ready(self) -> bool:
        """Write every response that is ready, in request order; True if any was. A response
        that waited behind an earlier one waited for the broker: its own time starts with the
        write before it."""
        order, client, clock = self._order, self.client, self.core.clock
        wrote = False
        written = 0.0
        while order and order[0].ready:
            pending = order.popleft()
            wrote = True
            if client is not None and not self.closed and not self._client_gone and \
                    pending.payload is not None:
                _send(client, pending.payload)
                now = clock()
                if pending.kind != TOKEN:
                    pending.own += now - max(pending.since, written)
                    self.core.metrics.latency(pending.header.api_key, pending.own)
                written = now
        return wrote

    # ------------------------------------------------------------------------- muting

    def _mute_until(self, until: int) -> None:
        """KIP-219: read nothing more from this client until `until` (epoch ms)."""
        if until > self._muted_until:
            self._muted_until = until
        if "mute" in self._pauses and self._unmute is not None:
            self._unmute.cancel()
        self._pause("mute")
        delay = max(0.0, (self._muted_until - self.core.now_ms()) / 1000.0)
        self._unmute = asyncio.get_running_loop().call_later(delay, self._end_mute)

    def _end_mute(self) -> None:
        self._unmute = None
        if self.core.now_ms() < self._muted_until:  # the clock moved less than the timer
            self._mute_until(self._muted_until)
            return
        self._muted_until = 0
        self.active = self.core.clock()  # idle from the end of its throttle, at the earliest
        self._resume("mute")

    @property
    def muted(self) -> bool:
        return "mute" in self._pauses
