"""Thousands of hostile connections at once, on real loopback sockets, through a real gateway in
front of a fake broker: random bytes, random frames, huge and negative sizes, half-sent frames,
senders that write one byte at a time, SaslHandshake v0 with whatever after it, connections that
say nothing. The gateway's memory stays within its caps (open connections in all and per IP,
bytes buffered per connection), and a well-behaved client on another address is still served."""

from __future__ import annotations

import asyncio
import random
import time
import struct

from app.gateway import apis
from app.gateway.connection import READ_AHEAD
from app.gateway.frames import SIZE, frame
from app.gateway.limits import Limits
from app.gateway.server import Gateway
from tests.unit.hostile_frames import KINDS, hostile_frame
from tests.unit.kafka_frames import produce_request, request, request_body
from tests.unit.loopback import FakeBroker, read_frame, start_gateway

ATTACKERS = ("127.0.0.2", "127.0.0.3")
SLOW_ADDRESS = "127.0.0.4"
CONNECTIONS = 3000  # attempts, half from each attacker address
BATCH = 100  # opened at once (asyncio's listen backlog is 100)
LIMITS = Limits(max_request_bytes=1 << 20, max_connections=1200, max_connections_per_ip=400)
#: What one connection may hold: its largest frame or the read-ahead, plus one socket read.
PER_CONNECTION = max(LIMITS.max_request_bytes, READ_AHEAD) + 256 * 1024
SLOW_SENDERS = 20
GOOD_REQUESTS = 20


def hostile_bytes(rng: random.Random) -> bytes:
    """What one hostile connection sends at once."""
    kind = rng.randrange(6)
    if kind == 0:  # not Kafka at all
        return rng.randbytes(rng.randint(1, 4096))
    if kind == 1:  # a size no frame may have
        return SIZE.pack(rng.choice([2**31 - 1, 200 << 20, -5, LIMITS.max_request_bytes + 1]))
    if kind == 2:  # a large frame, half sent, then nothing: it holds what was sent
        return SIZE.pack(900 * 1024) + rng.randbytes(rng.randint(0, 64 * 1024))
    if kind == 3:  # frames of real and made-up APIs and versions, with random bodies
        return b"".join(frame(struct.pack(">hhih", rng.choice([rng.randint(-5, 32767),
                                                               rng.randrange(80)]),
                                          rng.randint(-1, 70), rng.randint(0, 2**31 - 1), 1) +
                              b"c" + rng.randbytes(rng.randint(0, 8192)))
                        for _ in range(rng.randint(1, 5)))
    if kind == 4:  # SaslHandshake v0, then raw bytes and requests before any answer
        sasl = request(apis.SASL_HANDSHAKE, 0, request_body(
            apis.SASL_HANDSHAKE, 0, mechanism=rng.choice(["PLAIN", "GSSAPI", "X" * 300])))
        return frame(sasl) + frame(rng.randbytes(rng.randint(0, 600))) + \
            frame(produce_request(2, size=rng.randint(0, 20_000)))
    return b""  # connected, silent


async def open_hostile(rng: random.Random, port: int, source: str,
                       held: list[asyncio.StreamWriter]) -> None:
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    except OSError:
        return
    held.append(writer)
    writer.write(hostile_bytes(rng))


async def slow_sender(port: int, held: list[asyncio.StreamWriter]) -> None:
    """A Produce request written one byte at a time, each its own segment (TCP_NODELAY)."""
    _reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                    local_addr=(SLOW_ADDRESS, 0))
    held.append(writer)
    for byte in frame(produce_request(1, size=2000)):
        if writer.is_closing():
            return
        writer.write(bytes([byte]))
        await writer.drain()
        await asyncio.sleep(0)  # the next byte in a later turn of the loop: one read each


async def good_client(port: int) -> int:
    """Produce requests one at a time from an address of its own; how many were answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.1", 0))
    answered = 0
    try:
        for corr in range(GOOD_REQUESTS):
            writer.write(frame(produce_request(corr, client_id="good")))
            answer = await read_frame(reader)
            assert struct.unpack_from(">i", answer)[0] == corr
            answered += 1
    finally:
        writer.close()
    return answered


def assert_within_caps(gateway: Gateway) -> None:
    assert len(gateway.sessions) <= LIMITS.max_connections
    for ip in ATTACKERS:
        assert gateway.counts.of(ip) <= LIMITS.max_connections_per_ip
    worst = max((s.buffered for s in gateway.sessions), default=0)
    assert worst <= PER_CONNECTION


async def test_thousands_of_hostile_connections_stay_within_the_caps() -> None:
    rng = random.Random(20261125)
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker, limits=LIMITS)
    port = gateway.listening_port()
    held: list[asyncio.StreamWriter] = []
    try:
        async with asyncio.timeout(45):
            for start in range(0, CONNECTIONS, BATCH):
                await asyncio.gather(*(open_hostile(rng, port, ATTACKERS[i % 2], held)
                                       for i in range(start, start + BATCH)))
                assert_within_caps(gateway)
            slow = [asyncio.create_task(slow_sender(port, held)) for _ in range(SLOW_SENDERS)]
            assert await good_client(port) == GOOD_REQUESTS
            assert_within_caps(gateway)
            await asyncio.gather(*slow, return_exceptions=True)
            assert_within_caps(gateway)
        metrics = gateway.metrics.registry.get_sample_value
        assert metrics("quota_streams_gateway_connections_total", {"outcome": "over_ip_limit"})
        for reason in ("frame_size", "bad_header"):
            assert metrics("quota_streams_gateway_closed_connections_total", {"reason": reason})
        gateway.sweep(time.perf_counter())  # the gauge holds what the last sweep summed
        assert metrics("quota_streams_gateway_buffered_bytes") == sum(
            s.buffered for s in gateway.sessions) > 0
    finally:
        for writer in held:
            writer.transport.abort()
        await gateway.stop()
        await broker.stop()


async def hostile_exchange(port: int, payload: bytes) -> bool:
    """Send one hostile frame on a connection of its own; True once the gateway closed it or
    answered (it must do one or the other, never hang)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(frame(payload))
        async with asyncio.timeout(10):
            await reader.read(1)  # an answer's first byte, or EOF
        return True
    except ConnectionError:  # closed before all of it was read: refused on its head
        return True
    except TimeoutError:
        return False
    finally:
        writer.transport.abort()


async def test_structurally_valid_frames_with_hostile_counts_are_refused_or_served() -> None:
    """Frames valid up to one count or length (`tests.unit.hostile_frames`), up to 16 MiB: each
    is refused with a counted reason or forwarded as Kafka would read it, none hangs, and a
    good client is served between them."""
    rng = random.Random(20261127)
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker)
    port = gateway.listening_port()
    try:
        frames = [hostile_frame(kind, rng, 1 << 20) for kind in KINDS for _ in range(12)]
        frames += [hostile_frame("tagged_count", rng, 0) + bytes(16 << 20) for _ in range(2)]
        rng.shuffle(frames)
        for start in range(0, len(frames), 8):
            done = await asyncio.gather(*(hostile_exchange(port, f)
                                          for f in frames[start:start + 8]))
            assert all(done)
            assert await good_client(port) == GOOD_REQUESTS
        closed = {sample.labels["reason"] for family in gateway.metrics.registry.collect()
                  for sample in family.samples
                  if sample.name == "quota_streams_gateway_closed_connections_total"
                  and sample.value > 0}
        assert {"bad_header", "request_undecodable", "mutation_undecodable"} <= closed
        assert closed <= {"bad_header", "request_undecodable", "mutation_undecodable",
                          "broker_protocol"}
    finally:
        await gateway.stop()
        await broker.stop()
