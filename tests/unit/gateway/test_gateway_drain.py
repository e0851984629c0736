"""Stopping the gateway (SIGTERM): hand-written clients on real loopback sockets, one with a
request at the broker when the drain starts, through a real gateway in front of a fake broker
that holds its answers until told."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import struct

import aiohttp

from app.commands.gateway import _serve
from app.gateway import apis
from app.gateway.frames import frame
from app.gateway.server import Gateway
from app.subscriber.active_set import ActiveSet
from tests.unit.kafka_frames import decode_response, produce_request
from tests.unit.loopback import FakeBroker, cluster_of, loopback_config, read_frame, start_gateway


async def in_flight(port: int, broker: FakeBroker, corr: int
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client whose Produce `corr` has reached the broker, which holds its answer."""
    broker.hold()
    broker.received.clear()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame(produce_request(corr)))
    async with asyncio.timeout(10):
        await broker.received.wait()
    return reader, writer


async def answered_then_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               corr: int) -> None:
    """The next frame answers `corr`; then the gateway closes the connection (EOF), and the
    client closes its side as Kafka clients do."""
    async with asyncio.timeout(10):
        answer = await read_frame(reader)
        assert decode_response(apis.PRODUCE, 9, answer).responses  # a whole Produce response
        assert struct.unpack_from(">i", answer) == (corr,)
        assert await reader.read() == b""
    writer.close()


async def refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def test_a_request_in_flight_when_the_drain_starts_is_answered_then_the_connection_closes(
) -> None:
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker)
    port = gateway.listening_port()
    try:
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await in_flight(port, broker, corr=41)
        gateway.drain()
        drained = asyncio.create_task(gateway.drained(timeout=10))
        # a connection owing nothing closes at once; no new connection is accepted
        async with asyncio.timeout(10):
            assert await idle_reader.read() == b""
        idle_writer.close()  # as a Kafka client does on EOF: the gateway waits for it
        assert await refused(port)
        # a request sent after the drain started is not handled (it is read and dropped)
        writer.write(frame(produce_request(42)))
        await writer.drain()
        assert not drained.done()
        broker.release.set()
        await answered_then_closed(reader, writer, corr=41)
        async with asyncio.timeout(10):
            await drained
        assert not gateway.sessions
    finally:
        idle_writer.close()
        writer.close()
        await gateway.stop()
        await broker.stop()


async def test_the_drain_is_bounded_requests_still_in_flight_then_lose_their_connection(
) -> None:
    broker = FakeBroker()
    await broker.start()
    gateway = await start_gateway(broker)
    try:
        reader, writer = await in_flight(gateway.listening_port(), broker, corr=7)
        loop = asyncio.get_running_loop()
        started = loop.time()
        gateway.drain()
        await gateway.drained(timeout=0.3)
        assert 0.3 <= loop.time() - started < 5
        assert not gateway.sessions
        async with asyncio.timeout(10):
            try:
                assert await reader.read() == b""  # closed, never answered
            except ConnectionResetError:
                pass
    finally:
        writer.close()
        broker.release.set()
        await gateway.stop()
        await broker.stop()


class OnLoopback(Gateway):
    """Starts without Kafka, serving the fake broker's cluster; tells when it serves and when it
    drains."""

    def __init__(self, broker: FakeBroker) -> None:
        super().__init__(loopback_config(broker), directives=ActiveSet(None))
        self.info = cluster_of(broker)
        self.serving = asyncio.Event()
        self.draining_now = asyncio.Event()

    async def start(self) -> None:
        await self.serve(self.info)
        self.serving.set()

    def drain(self) -> None:
        super().drain()
        self.draining_now.set()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def ready(session: aiohttp.ClientSession, port: int) -> tuple[int, dict[str, bool]]:
    async with session.get(f"http://127.0.0.1:{port}/ready") as answer:
        return answer.status, await answer.json()


async def test_sigterm_drains_the_gateway_and_ready_says_so() -> None:
    """The command's own loop: /ready answers 200 while serving and 503 from SIGTERM on, the
    request in flight is answered, then the command returns."""
    broker = FakeBroker()
    await broker.start()
    gateway = OnLoopback(broker)
    metrics_port = free_port()
    args = argparse.Namespace(metrics_port=metrics_port, metrics_host="127.0.0.1",
                              drain_timeout_ms=10_000)
    serving = asyncio.create_task(_serve(gateway, args))
    http = aiohttp.ClientSession()
    writer = None
    try:
        async with asyncio.timeout(10):
            await gateway.serving.wait()
        status, body = await ready(http, metrics_port)
        assert (status, body["ready"], body["draining"]) == (200, True, False)
        reader, writer = await in_flight(gateway.listening_port(), broker, corr=9)
        os.kill(os.getpid(), signal.SIGTERM)
        async with asyncio.timeout(10):
            await gateway.draining_now.wait()
        status, body = await ready(http, metrics_port)
        assert (status, body["ready"], body["draining"]) == (503, False, True)
        assert not serving.done()  # it owes an answer
        broker.release.set()
        await answered_then_closed(reader, writer, corr=9)
        async with asyncio.timeout(10):
            await serving
    finally:
        await http.close()
        if writer is not None:
            writer.close()
        serving.cancel()
        await broker.stop()
