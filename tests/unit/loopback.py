"""A real gateway on loopback sockets in front of a small fake broker, for tests whose behaviour
crosses asyncio transports: connection caps, slow or hostile senders, sockets left behind.

The broker answers what a Kafka broker without SASL answers to the requests the tests send
(Produce v9, SaslHandshake with ILLEGAL_SASL_STATE) and, as Kafka does with a request it cannot
parse, closes the connection on anything else."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from app.enforcement.local import LocalQuotas
from app.engine.configs import parse_config_record
from app.engine.engine import EngineSettings
from app.gateway import apis
from app.gateway.frames import FrameError, frame, request_header
from app.gateway.limits import Limits
from app.gateway.messages import Node
from app.gateway.config import GatewayConfig
from app.gateway.server import ClusterInfo, Gateway
from app.kafka.security import PLAINTEXT
from app.signing import Signing
from app.subscriber.active_set import ActiveSet
from tests.unit.kafka_frames import produce_response, response

ILLEGAL_SASL_STATE = ErrorCode(34)


class FakeBroker:
    """A loopback listener answering like a broker; counts the connections it has open."""

    def __init__(self) -> None:
        self.open = 0
        self.accepted = 0
        self.changed = asyncio.Event()  # set whenever a connection opens or closes
        self.received = asyncio.Event()  # set whenever a request was read
        self.release = asyncio.Event()  # answers wait for it (`hold`)
        self.release.set()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def hold(self) -> None:
        """Answer nothing until `release` is set: requests stay in flight."""
        self.release.clear()

    async def wait_open(self, count: int, timeout: float = 10.0) -> None:
        """Until exactly `count` connections are open."""
        async with asyncio.timeout(timeout):
            while self.open != count:
                self.changed.clear()
                await self.changed.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.open += 1
        self.accepted += 1
        self.changed.set()
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                payload = await reader.readexactly(size)
                self.received.set()
                await self.release.wait()
                answer = self._answer(payload)
                if answer is None:
                    break
                if answer:
                    writer.write(frame(answer))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            self.open -= 1
            self.changed.set()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    def _answer(payload: bytes) -> bytes | None:
        """The answer to a request (b"": none, acks=0), or None to close the connection."""
        try:
            header = request_header(payload)
        except FrameError:
            return None
        key, version, corr = header.api_key, header.api_version, header.correlation_id
        if key == apis.PRODUCE and version == 9:
            acks_at = header.body + 1  # a null transactional id, then acks
            return b"" if payload[acks_at:acks_at + 2] == b"\x00\x00" else produce_response(corr)
        if key == apis.SASL_HANDSHAKE and version in (0, 1):
            return response(apis.SASL_HANDSHAKE, version, corr, error_code=ILLEGAL_SASL_STATE,
                            mechanisms=())
        return None


def loopback_config(broker: FakeBroker, limits: Limits | None = None,
                    proxy_protocol: bool = False) -> GatewayConfig:
    """A gateway's config: an ephemeral loopback port in front of `broker`, no Kafka."""
    return GatewayConfig(upstream=(("127.0.0.1", broker.port),), listen=("127.0.0.1", 0),
                         advertised_host="127.0.0.1", kafka_bootstrap="", topics={},
                         kafka_security=PLAINTEXT, signing=Signing(),
                         directives_topic="", first_node_id=1, max_nodes=0,
                         limits=limits or Limits(), proxy_protocol=proxy_protocol)


def cluster_of(broker: FakeBroker) -> ClusterInfo:
    """What the start-up probe would learn of `broker`: one node, id 1."""
    return ClusterInfo([Node(1, "127.0.0.1", broker.port)], {}, ("127.0.0.1", broker.port))


async def start_gateway(broker: FakeBroker, limits: Limits | None = None,
                        quotas: list[dict[str, Any]] | None = None,
                        gateway_class: type[Gateway] = Gateway,
                        proxy_protocol: bool = False) -> Gateway:
    """A gateway on an ephemeral loopback port in front of `broker` (bootstrap port only), with
    directives and, given `quotas`, its own quota engine (windows 11 x 100 ms); no Kafka."""
    config = loopback_config(broker, limits or Limits(), proxy_protocol)
    local = None
    if quotas is not None:
        local = LocalQuotas(EngineSettings(window_ms=100, controller_window_ms=100))
        for q in quotas:
            local.engine.add_config(parse_config_record(
                {"type": "quota_config", "v": 1, "ts": 0, **q}))
    gateway = gateway_class(config, directives=ActiveSet(None), local=local)
    await gateway.serve(cluster_of(broker))
    return gateway


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)
