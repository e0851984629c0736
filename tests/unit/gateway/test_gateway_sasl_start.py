"""The gateway in front of a SASL listener, on loopback sockets with a fake broker that serves
what a Kafka SASL listener serves before authentication (ApiVersions and SASL; anything else
closes the connection): it starts without a Metadata probe, and learns its brokers from the
first connection that authenticates, on that connection, without the client seeing it."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

import orjson
import pytest
from kio.schema.errors import ErrorCode

from app.devstack.launcher import free_ports
from app.gateway import apis
from app.gateway.config import GatewayConfig
from app.gateway.frames import frame, request_header
from app.gateway.server import UNKNOWN_NODE, Gateway, GatewayError, probe_cluster
from app.kafka.security import PLAINTEXT
from app.signing import Signing
from app.subscriber.active_set import ActiveSet
from app.usage.records import RecordEncoder
from tests.unit.gateway_harness import Harness, sent
from tests.unit.kafka_frames import (
    NONE,
    decode_response,
    metadata_response,
    ms,
    nested,
    request,
    request_body,
    response,
)
from tests.unit.loopback import read_frame

FAILED = ErrorCode(58)  # SASL_AUTHENTICATION_FAILED


class SaslBroker:
    """Two brokers (1 and 2) on one loopback port, SASL/PLAIN only, password "right"."""

    def __init__(self) -> None:
        self.requests: list[list[int]] = []  # api keys, per connection
        self._server: asyncio.base_events.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        keys: list[int] = []
        self.requests.append(keys)
        authenticated = False
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                payload = await reader.readexactly(size)
                header = request_header(payload)
                key, version, corr = header.api_key, header.api_version, header.correlation_id
                keys.append(key)
                if key == apis.API_VERSIONS:
                    answer = api_versions(corr)
                elif key == apis.SASL_HANDSHAKE:
                    answer = response(key, version, corr, error_code=NONE, mechanisms=("PLAIN",))
                elif key == apis.SASL_AUTHENTICATE:
                    token = decode_request(payload).auth_bytes
                    authenticated = token.endswith(b"\x00right")
                    answer = response(key, version, corr, error_code=NONE if authenticated
                                      else FAILED, error_message=None if authenticated
                                      else "Authentication failed: Invalid username or password",
                                      auth_bytes=b"", session_lifetime=ms(0))
                elif key == apis.METADATA and authenticated:
                    answer = metadata_response(version, [(1, "127.0.0.1", self.port),
                                                         (2, "127.0.0.1", self.port)],
                                               correlation_id=corr)
                else:
                    break  # Kafka: an unexpected request during the SASL handshake closes
                writer.write(frame(answer))
                if key == apis.SASL_AUTHENTICATE and not authenticated:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def api_versions(corr: int) -> bytes:
    key = nested(apis.API_VERSIONS, 0, "ApiVersion")
    return response(apis.API_VERSIONS, 0, corr, error_code=NONE, api_keys=tuple(
        key(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in (
            (apis.METADATA, 0, 12), (apis.API_VERSIONS, 0, 3), (apis.SASL_HANDSHAKE, 0, 1),
            (apis.SASL_AUTHENTICATE, 0, 2))))


def decode_request(payload: bytes) -> Any:
    from kio.serial import entity_reader

    header = request_header(payload)
    schema = apis.request_schema(header.api_key, header.api_version)
    return entity_reader(schema)(payload, header.body)[0]


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       password: str) -> Any:
    """ApiVersions, SaslHandshake v1 PLAIN, SaslAuthenticate v2 as alice: the answer to the last."""
    writer.write(frame(request(apis.API_VERSIONS, 0, request_body(apis.API_VERSIONS, 0),
                               correlation_id=1)))
    await read_frame(reader)
    writer.write(frame(request(apis.SASL_HANDSHAKE, 1, request_body(
        apis.SASL_HANDSHAKE, 1, mechanism="PLAIN"), correlation_id=2)))
    await read_frame(reader)
    writer.write(frame(request(apis.SASL_AUTHENTICATE, 2, request_body(
        apis.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00" + password.encode()),
        correlation_id=3)))
    return decode_response(apis.SASL_AUTHENTICATE, 2, await read_frame(reader))


async def sasl_gateway(broker: SaslBroker) -> Gateway:
    port = free_ports(3)
    config = GatewayConfig(upstream=(("127.0.0.1", broker.port),), listen=("127.0.0.1", port),
                           advertised_host="127.0.0.1", kafka_bootstrap="", topics={},
                           kafka_security=PLAINTEXT, signing=Signing(),
                           directives_topic="", max_nodes=2, upstream_sasl=True)
    info = await probe_cluster(config.upstream, None, 5.0, sasl=True)
    gateway = Gateway(config, directives=ActiveSet(None))
    await gateway.serve(info)
    return gateway



def recorded(gateway: Gateway) -> list[dict[str, Any]]:
    """The usage events recorded since the last call, as the records sent carry them."""
    return [e for record in RecordEncoder().records(gateway.usage.flush())
            for e in orjson.loads(record.value)["events"]]

async def test_the_start_up_probe_of_a_sasl_listener_asks_only_api_versions() -> None:
    broker = SaslBroker()
    await broker.start()
    try:
        info = await probe_cluster((("127.0.0.1", broker.port),), None, 5.0, sasl=True)
        assert info.nodes == [] and info.versions[apis.METADATA] == (0, 12)
        assert broker.requests == [[apis.API_VERSIONS]]
        with pytest.raises(GatewayError, match="give --upstream-sasl"):
            await probe_cluster((("127.0.0.1", broker.port),), None, 5.0)
    finally:
        await broker.stop()


async def test_the_first_authenticated_connection_teaches_the_gateway_its_brokers() -> None:
    broker = SaslBroker()
    await broker.start()
    gateway = await sasl_gateway(broker)
    listen = gateway.config.listen[1]
    try:
        assert gateway.bootstrap_node is None and not gateway.cluster_known
        reader, writer = await asyncio.open_connection("127.0.0.1", listen)
        assert (await authenticate(reader, writer, "right")).error_code == NONE
        writer.write(frame(request(apis.METADATA, 12, request_body(
            apis.METADATA, 12, topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), correlation_id=4)))
        answer = await read_frame(reader)
        assert struct.unpack_from(">i", answer)[0] == 4  # the client's answer, not the gateway's
        brokers = decode_response(apis.METADATA, 12, answer).brokers
        assert [(b.node_id, b.host, b.port) for b in brokers] == [
            (1, "127.0.0.1", listen + 1), (2, "127.0.0.1", listen + 2)]
        writer.close()
        # the gateway asked on the client's connection, after it authenticated, once
        assert broker.requests[1] == [apis.API_VERSIONS, apis.SASL_HANDSHAKE,
                                      apis.SASL_AUTHENTICATE, apis.METADATA, apis.METADATA]
        assert gateway.bootstrap_node == 1 and gateway.nodes is not None
        assert gateway.nodes.rule.first_node_id == 1
        # charged to broker 1 once known; the authenticator's requests not at all
        events = recorded(gateway)
        assert [(e["type"], e["broker"], e.get("api")) for e in events] == [
            ("request", 1, "Metadata"), ("connection", 1, None)]
        assert events[0]["user"] == "alice"
        # broker 2's port is served now, straight to its own connection
        reader2, writer2 = await asyncio.open_connection("127.0.0.1", listen + 2)
        assert (await authenticate(reader2, writer2, "right")).error_code == NONE
        writer2.close()
        assert broker.requests[2][-1] == apis.SASL_AUTHENTICATE  # nothing more to learn
    finally:
        await gateway.stop()
        await broker.stop()


async def test_a_connection_accepted_before_the_cluster_was_known_is_charged_to_its_broker() -> None:
    broker = SaslBroker()
    await broker.start()
    gateway = await sasl_gateway(broker)
    listen = gateway.config.listen[1]
    try:
        early_reader, early_writer = await asyncio.open_connection("127.0.0.1", listen)
        early_writer.write(frame(request(apis.API_VERSIONS, 0, request_body(apis.API_VERSIONS, 0),
                                         correlation_id=1)))
        await read_frame(early_reader)  # admitted, with no broker known yet
        early = next(iter(gateway.sessions))
        assert early.node_id == UNKNOWN_NODE
        assert recorded(gateway) == []
        reader, writer = await asyncio.open_connection("127.0.0.1", listen)
        await authenticate(reader, writer, "right")
        await read_frame_or_timeout(early_reader, gateway)
        assert early.node_id == 1
        assert [(e["type"], e["broker"]) for e in recorded(gateway)] == [("connection", 1)] * 2
        writer.close()
        early_writer.close()
    finally:
        await gateway.stop()
        await broker.stop()


async def read_frame_or_timeout(reader: asyncio.StreamReader, gateway: Gateway) -> None:
    """Until the gateway knows its bootstrap broker (the internal answer arrived)."""
    async with asyncio.timeout(5):
        while gateway.bootstrap_node is None:
            await asyncio.sleep(0.01)


async def test_a_wrong_password_gets_the_brokers_error_through_the_gateway() -> None:
    broker = SaslBroker()
    await broker.start()
    gateway = await sasl_gateway(broker)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.config.listen[1])
        answer = await authenticate(reader, writer, "wrong")
        assert answer.error_code == FAILED and "Invalid username" in answer.error_message
        assert await reader.read() == b""  # then closed, as the broker closed it
        assert not gateway.cluster_known  # a refused exchange teaches nothing
    finally:
        await gateway.stop()
        await broker.stop()


def test_a_delegation_token_is_answered_with_an_authentication_error_and_closed() -> None:
    h = Harness(upstream_sasl=True)
    h.send(request(apis.SASL_HANDSHAKE, 1, request_body(apis.SASL_HANDSHAKE, 1,
                                                        mechanism="SCRAM-SHA-256"), correlation_id=1))
    h.answer(response(apis.SASL_HANDSHAKE, 1, 1, error_code=NONE, mechanisms=("SCRAM-SHA-256",)))
    assert sent(h.broker.frames()) == [1]
    h.client.frames()
    h.send(request(apis.SASL_AUTHENTICATE, 2, request_body(
        apis.SASL_AUTHENTICATE, 2, auth_bytes=b"n,,n=tok1,r=abc,tokenauth=true"), correlation_id=2))
    (answer,) = h.client.frames()
    got = decode_response(apis.SASL_AUTHENTICATE, 2, answer)
    assert got.error_code == FAILED and "Delegation tokens" in got.error_message
    assert h.broker.frames() == []  # the token never reached the broker
    assert h.client.closed and h.closed("delegation_token") == 1
    assert h.events() == []
