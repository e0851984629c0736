"""`--proxy-protocol`: behind a load balancer, a connection's PROXY header names its client, and
that address is the one the per-IP caps, the connection quotas and the usage events see. A
connection without a valid header is closed, counted; with the option off, a header is never
read as one (a client cannot name another address)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import struct

import orjson

from app.gateway.connection import Session
from app.gateway.frames import frame
from app.gateway.limits import PROXY_HEADER_TIMEOUT_S, Limits
from app.gateway.server import Gateway
from app.usage.records import RecordEncoder
from tests.unit.gateway_harness import BROKER, FakeSocket, Harness, answered, sent
from tests.unit.kafka_frames import produce_request, produce_response
from tests.unit.loopback import FakeBroker, read_frame, start_gateway

BALANCER = ("10.1.0.2", 40000)  # the socket's peer: the load balancer


def v1(client: str) -> bytes:
    return f"PROXY TCP4 {client} 10.1.0.9 51000 9192\r\n".encode()


def v2(client: str) -> bytes:
    block = (ipaddress.IPv4Address(client).packed + ipaddress.IPv4Address("10.1.0.9").packed
             + struct.pack(">HH", 51000, 9192))
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack(">H", len(block)) + block


class Balanced(Harness):
    """A harness whose gateway reads PROXY headers; `connect` opens more connections."""

    def __init__(self, limits: Limits | None = None) -> None:
        super().__init__(limits=limits, proxy_protocol=True)
        self.client.peer = BALANCER
        self.brokers: dict[Session, FakeSocket] = {}

    def _connect(self, session: Session) -> None:
        broker = self.brokers.setdefault(session, FakeSocket())
        session.upstream_made(broker)  # type: ignore[arg-type]
        session.connected()

    def connect(self) -> tuple[Session, FakeSocket]:
        session, client = Session(self.gateway, BROKER), FakeSocket(BALANCER)
        session.client_made(client)  # type: ignore[arg-type]
        return session, client


def ips(gateway: Gateway) -> dict[str, list[str]]:
    """The client addresses of the usage events recorded since the last call, by event kind."""
    out: dict[str, list[str]] = {}
    for record in RecordEncoder().records(gateway.usage.flush()):
        out.setdefault(record.kind, []).extend(e["ip"] for e in orjson.loads(record.value)["events"])
    return out


def connection_ips(h: Harness) -> list[str]:
    return ips(h.gateway).get("connection", [])


async def test_the_header_names_the_client_the_events_and_caps_see() -> None:
    h = Balanced()
    session, client = h.connect()
    assert not session.placed and h.gateway.counts.total == 2  # open (the harness's too), not
    # admitted yet
    session.client_data(v2("203.0.113.7") + frame(produce_request(1)))  # one read: both
    assert session.ip == "203.0.113.7"
    assert sent(h.brokers[session].frames()) == [1]
    session.upstream_data(frame(produce_response(1)))
    assert answered(client.frames()) == [1]
    # the Produce's bytes as forwarded, its time as answered
    assert ips(h.gateway) == {"connection": ["203.0.113.7"], "request": ["203.0.113.7"] * 2}
    assert h.gateway.counts.of("203.0.113.7") == 1 and h.gateway.counts.of(BALANCER[0]) == 0
    session.close()
    assert h.gateway.counts.of("203.0.113.7") == 0 and h.gateway.counts.total == 1  # the harness's


async def test_the_per_ip_cap_counts_the_clients_behind_one_balancer_apart() -> None:
    h = Balanced(limits=Limits(max_connections_per_ip=1))
    a, _ = h.connect()
    b, _ = h.connect()
    c, _ = h.connect()
    a.client_data(v1("203.0.113.7"))
    b.client_data(v1("203.0.113.8"))  # another client through the same balancer: admitted
    c.client_data(v1("203.0.113.7"))  # the first one's second connection: over its cap
    assert (a.closed, b.closed, c.closed) == (False, False, True)
    assert h.gateway.metrics.registry.get_sample_value(
        "quota_streams_gateway_connections_total", {"outcome": "over_ip_limit"}) == 1
    assert connection_ips(h) == ["203.0.113.7", "203.0.113.8"]


async def test_a_connection_is_admitted_only_once_its_header_is_complete() -> None:
    h = Balanced()
    session, _client = h.connect()
    header = v1("198.51.100.1")
    for byte in range(len(header) - 1):  # a slow balancer, one byte at a time
        session.client_data(header[byte:byte + 1])
        assert not session.placed and session not in h.brokers
    session.client_data(header[-1:])
    assert session.placed and session.ip == "198.51.100.1"
    assert connection_ips(h) == ["198.51.100.1"]


async def test_a_health_check_without_a_client_is_the_balancers_own() -> None:
    h = Balanced()
    for header in (b"PROXY UNKNOWN\r\n", b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"):  # LOCAL
        session, _client = h.connect()
        session.client_data(header)
        assert session.placed and session.ip == BALANCER[0]
    assert connection_ips(h) == [BALANCER[0]] * 2


async def test_a_connection_without_a_valid_header_is_closed_before_reaching_a_broker() -> None:
    h = Balanced()
    for first in (frame(produce_request(1)),  # a client straight to the gateway
                  b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",  # LF alone
                  b"GET / HTTP/1.1\r\n"):
        session, client = h.connect()
        session.client_data(first)
        assert session.closed and client.closed and session not in h.brokers
    assert h.closed("proxy_header") == 3
    assert h.gateway.counts.total == 1  # the harness's own, still waiting for its header


async def test_a_header_not_complete_in_time_is_closed_by_the_sweep() -> None:
    h = Balanced()
    session, _client = h.connect()
    session.client_data(b"PROXY TCP4 203.0")
    h.gateway.sweep(session.opened_at + PROXY_HEADER_TIMEOUT_S / 2)
    assert not session.closed
    h.gateway.sweep(session.opened_at + PROXY_HEADER_TIMEOUT_S + 0.1)
    assert session.closed
    assert h.closed("proxy_header_timeout") == 2  # and the harness's own, never sent a byte


async def test_with_the_option_off_a_header_is_kafka_bytes_and_names_nobody() -> None:
    for header in (v1("203.0.113.7"), v2("203.0.113.7")):
        h = Harness()  # --proxy-protocol off
        h.session.client_data(header + frame(produce_request(1)))
        assert h.session.closed and h.closed("frame_size") == 1  # "PROX" / "\r\n\r\n": a size
        assert h.session.ip == "10.0.0.7" and h.broker.written == b""


async def test_behind_a_balancer_on_real_sockets() -> None:
    """The header and the first request in one write; the request is read only once the
    connection was admitted and its broker connection made (asynchronously, here)."""
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker, proxy_protocol=True)
    assert gateway.config.proxy_protocol
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listening_port())
        writer.write(v2("192.0.2.44") + frame(produce_request(5)))
        answer = await read_frame(reader)
        assert struct.unpack_from(">i", answer)[0] == 5
        (session,) = gateway.sessions
        assert session.ip == "192.0.2.44" and session.placed
        assert set(ips(gateway)["request"]) == {"192.0.2.44"}
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    finally:
        await gateway.stop()
        await broker.stop()
