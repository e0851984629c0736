"""Hand-written clients on real loopback sockets through a real gateway in front of a fake
broker: what crosses asyncio transports (a SaslHandshake v0 attack, a client leaving while its
broker connection is being made)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from app.gateway import apis
from app.gateway.connection import Session
from app.gateway.frames import frame
from app.gateway.server import Gateway
from tests.unit.gateway_harness import FakeSocket
from tests.unit.kafka_frames import decode_response, produce_request, request, request_body
from tests.unit.loopback import FakeBroker, read_frame, start_gateway

QUOTAS = [{"entity": {"client_id": cid}, "quotas": {"producer_byte_rate": 20_000}}
          for cid in ("plain", "attacker")]


async def produce_until_throttled(port: int, client_id: str,
                                  handshake_first: bool) -> tuple[int, int, float]:
    """Produce v3-style, acks=1, one request at a time, 3 kB each, until a response carries a
    throttle: (requests sent by then, its throttle ms, seconds until the next request was
    answered). Raises if no throttle comes within 50 requests."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if handshake_first:  # raw SASL tokens would follow, if the broker accepted it
            writer.write(frame(request(apis.SASL_HANDSHAKE, 0, request_body(
                apis.SASL_HANDSHAKE, 0, mechanism="PLAIN"), correlation_id=1, client_id=client_id)))
            answer = await read_frame(reader)
            assert struct.unpack_from(">ih", answer) == (1, 34)  # ILLEGAL_SASL_STATE
        for n, corr in enumerate(range(10, 60), start=1):
            writer.write(frame(produce_request(corr, client_id=client_id, size=3000)))
            got = decode_response(apis.PRODUCE, 9, await read_frame(reader))
            throttle = int(got.throttle_time.total_seconds() * 1000)
            if throttle > 0:
                start = loop.time()
                writer.write(frame(produce_request(corr + 100, client_id=client_id, size=10)))
                await read_frame(reader)
                return n, throttle, loop.time() - start
        raise AssertionError(f"{client_id}: 50 requests over its quota, never throttled")
    finally:
        writer.close()


async def test_a_client_that_opens_with_sasl_handshake_v0_is_throttled_like_any_other() -> None:
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker, quotas=QUOTAS)
    try:
        port = gateway.listening_port()
        plain = await produce_until_throttled(port, "plain", handshake_first=False)
        attacker = await produce_until_throttled(port, "attacker", handshake_first=True)
    finally:
        await gateway.stop()
        await broker.stop()
    assert abs(plain[0] - attacker[0]) <= 1  # the same share of the same quota
    for _n, throttle, waited in (plain, attacker):
        assert waited >= 0.8 * throttle / 1000  # muted: its next request waited the throttle


class HeldConnects(Gateway):
    """A gateway whose broker connections wait for `release`, so a client can leave meanwhile."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = asyncio.Event()
        self.connecting = asyncio.Event()  # a broker connection waits for `release`
        self.connects: list[asyncio.Task[Any]] = []

    async def _connect(self, session: Session) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connects.append(task)
        self.connecting.set()
        await self.release.wait()
        await super()._connect(session)



async def test_a_client_that_leaves_while_its_broker_connection_is_made_leaves_no_socket() -> None:
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker, gateway_class=HeldConnects)
    assert isinstance(gateway, HeldConnects)
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listening_port())
        writer.write(frame(produce_request(1)))
        await gateway.connecting.wait()  # its first request: its broker connection is being made
        (session,) = gateway.sessions
        writer.transport.abort()
        # what asyncio then reports (a TLS transport even while reading is paused; a plain one
        # once reading resumes): the client is gone
        session.lost(False, None)
        gateway.release.set()
        for task in gateway.connects:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # a client after it: once it is answered, the broker has accepted every earlier connection
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listening_port())
        writer.write(frame(produce_request(1)))
        await read_frame(reader)
        writer.close()
        await broker.wait_open(0)
        assert broker.accepted == 1  # only the client that stayed ever reached the broker
    finally:
        await gateway.stop()
        await broker.stop()


async def test_a_broker_connection_made_for_a_client_already_gone_is_closed() -> None:
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker)
    try:
        session = Session(gateway, 1, bootstrap=True)
        session.close()
        upstream = FakeSocket()
        session.upstream_made(upstream)  # type: ignore[arg-type]
        assert upstream.closed and session.broker is None
    finally:
        await gateway.stop()
        await broker.stop()


async def test_a_throttled_connection_counts_as_muted() -> None:
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker, quotas=QUOTAS)
    muted = ("quota_streams_gateway_muted_connections", {})
    gauge = gateway.metrics.registry.get_sample_value
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.listening_port())
    try:
        gateway.sweep(gateway.clock())
        assert gauge(*muted) == 0
        for corr in range(10, 60):
            writer.write(frame(produce_request(corr, client_id="plain", size=3000)))
            got = decode_response(apis.PRODUCE, 9, await read_frame(reader))
            if got.throttle_time.total_seconds() > 0:
                break
        else:
            raise AssertionError("50 requests over its quota, never throttled")
        gateway.sweep(gateway.clock())
        assert gauge(*muted) == 1
    finally:
        writer.close()
        await gateway.stop()
        await broker.stop()
