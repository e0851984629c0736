"""An in-memory gateway connection for tests: a `Session` between two fake sockets, on a
`Gateway` with directives (and optionally its own quota engine) but no Kafka."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from app.enforcement.local import LocalQuotas
from app.engine.configs import parse_config_record
from app.engine.engine import EngineSettings
from app.gateway.connection import Session
from app.gateway.frames import SIZE, FrameReader, frame, request_header
from app.gateway.limits import Limits
from app.gateway.messages import Node
from app.gateway.nodes import NodeMap, PortRule
from app.gateway.config import GatewayConfig
from app.gateway.server import Gateway
from app.kafka.security import PLAINTEXT
from app.signing import Signing
from app.subscriber.active_set import ActiveSet
from app.usage.records import RecordEncoder

BROKER = 111


class Clock:
    """The gateway's connection clock (`Gateway.clock`, seconds) moved only by the test, so the
    times a test asserts are exact instead of bounds around a real sleep."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Turn the event loop until `condition` holds: for what a timer of the code under test
    does (a mute ends on the loop's own clock), as soon as it is done however busy the machine."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        await asyncio.sleep(0.005)


class FakeSocket:
    """An asyncio transport that keeps what is written and whether reading is paused."""

    def __init__(self, peer: tuple[str, int] = ("10.0.0.7", 50000)) -> None:
        self.peer = peer
        self.written = bytearray()
        self.paused = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return self.peer if name == "peername" else None

    def frames(self) -> list[bytes]:
        """The frames written since the last call."""
        reader = FrameReader()
        reader.feed(bytes(self.written))
        self.written.clear()
        out = []
        while (f := reader.next()) is not None:
            out.append(f)
        return out


class Harness:
    def __init__(self, max_in_flight: int = 1, quotas: list[dict[str, Any]] | None = None,
                 upstream_sasl: bool = False, limits: Limits | None = None,
                 proxy_protocol: bool = False, clock: Clock | None = None) -> None:
        """A session on a gateway with directives only, or with `quotas` its own local engine
        enforces (windows 11 x 100 ms, so tests wait little); with `clock`, the gateway's
        connection clock and wall clock (ms) are both the test's, from the connection on."""
        self.active = ActiveSet(None)
        config = GatewayConfig(upstream=(("b1", 9092),), listen=("127.0.0.1", 9192),
                               advertised_host="gw", kafka_bootstrap="", topics={},
                               kafka_security=PLAINTEXT, signing=Signing(),
                               directives_topic="", max_in_flight=max_in_flight,
                               upstream_sasl=upstream_sasl, limits=limits or Limits(),
                               proxy_protocol=proxy_protocol)
        local = None
        if quotas is not None:
            local = LocalQuotas(EngineSettings(window_ms=100, controller_window_ms=100))
            for q in quotas:
                local.engine.add_config(parse_config_record(
                    {"type": "quota_config", "v": 1, "ts": 0, **q}))
        self.gateway = gw = Gateway(config, directives=self.active, local=local)
        if clock is not None:
            gw.clock = clock
            gw.now_ms = lambda: int(clock.now * 1000)  # type: ignore[method-assign]
        gw.nodes = NodeMap(PortRule("gw", 9193, BROKER))
        gw.nodes.learn([Node(BROKER, "b1", 9092)])
        gw.bootstrap_node = BROKER
        self.client, self.broker = FakeSocket(), FakeSocket()
        self.session = Session(gw, BROKER)
        gw.connect = self._connect  # type: ignore[method-assign]
        gw.learn = self._learn  # type: ignore[method-assign]
        self.session.client_made(self.client)  # type: ignore[arg-type]

    def _learn(self, nodes: list[Node]) -> None:
        """Brokers named by a response; every one already has its port here."""
        assert self.gateway.nodes is not None
        self.gateway.nodes.learn(nodes)

    def _connect(self, session: Session) -> None:
        session.upstream_made(self.broker)  # type: ignore[arg-type]
        session.connected()

    def send(self, payload: bytes) -> None:
        self.session.client_data(frame(payload))

    def answer(self, payload: bytes) -> None:
        self.session.upstream_data(frame(payload))

    def closed(self, reason: str) -> float:
        """How many connections the gateway closed for `reason`."""
        value = self.gateway.metrics.registry.get_sample_value(
            "quota_streams_gateway_closed_connections_total", {"reason": reason})
        return value or 0.0

    def events(self, kind: str = "request") -> list[dict[str, Any]]:
        """The usage events of `kind` recorded since the last call (a flush), as the JSON
        records sent carry them."""
        return [e for record in RecordEncoder().records(self.gateway.usage.flush())
                if record.kind == kind for e in orjson.loads(record.value)["events"]]

    def throttle(self, quota: str, ms_: int, **entity: str) -> None:
        now = Gateway.now_ms()
        self.active.apply({"v": 1, "ts": now, "scope": "cluster", "broker": None,
                           "entity": {"user": "", "client_id": "", **entity}, "quota": quota,
                           "action": "reject" if quota == "controller_mutation_rate" else "throttle",
                           "throttle_time_ms": ms_, "until": now + ms_})


def sent(frames: list[bytes]) -> list[int]:
    """Correlation ids of request frames."""
    return [request_header(f).correlation_id for f in frames]


def answered(frames: list[bytes]) -> list[int]:
    """Correlation ids of response frames."""
    return [SIZE.unpack_from(f, 0)[0] for f in frames]
