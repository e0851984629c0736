"""A raw Kafka client for tests that hold the engine against a real broker.

One request at a time on a blocking socket of its own, written and read with kio's schemas (the
gateway's), so a test controls every byte sent and reads `throttle_time_ms` and the error codes
of each answer. Every exchange keeps the wall-clock times (epoch ms) its request left and its
answer arrived: the broker's clock read for that request lies in between.
"""

from __future__ import annotations

import io
import socket
import struct
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Self

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from app.gateway import apis

ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS = 49, 48


def _encode(schema: Any, entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(schema)(buf, entity)
    return buf.getvalue()


def schema(api_key: int, version: int, name: str, response: bool = False) -> Any:
    """A nested class of an API's request (or response) schema, by its name in kio."""
    top = (apis.response_schema if response else apis.request_schema)(api_key, version)
    return getattr(sys.modules[top.__module__], name)


def now_ms() -> float:
    return time.time() * 1000.0


@dataclass(frozen=True)
class Exchange:
    """One request and its answer."""

    sent_ms: float
    received_ms: float
    #: the request's size as the broker counts it (`RequestChannel.Request.sizeInBytes`:
    #: header and body, no size prefix)
    request_size: int
    response_size: int  # the answer's header and body, no size prefix
    response_header_size: int
    body: Any

    @property
    def throttle_ms(self) -> int:
        return int(self.body.throttle_time / timedelta(milliseconds=1))

    @property
    def mid_ms(self) -> int:
        return round((self.sent_ms + self.received_ms) / 2)

    @property
    def rtt_ms(self) -> float:
        return self.received_ms - self.sent_ms


class RawConnection:
    """A client connection to one broker, optionally from a chosen loopback address."""

    def __init__(self, address: str, source_ip: str | None = None, timeout: float = 10.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection(
            (host, int(port)), timeout=timeout,
            source_address=(source_ip, 0) if source_ip else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def send(self, api_key: int, version: int, body: Any, client_id: str) -> tuple[float, int]:
        """Write one request; (when it left, its size without the size prefix)."""
        top = apis.request_schema(api_key, version)
        header = top.__header_schema__
        self.correlation += 1
        payload = _encode(header, header(
            request_api_key=api_key, request_api_version=version,
            correlation_id=self.correlation, client_id=client_id)) + _encode(top, body)
        sent = now_ms()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        return sent, len(payload)

    def receive(self, api_key: int, version: int) -> tuple[float, bytes, Any, int]:
        """Read one answer: (when it arrived, its payload, its body, its header size)."""
        size = struct.unpack(">i", self._read(4))[0]
        payload = self._read(size)
        received = now_ms()
        top = apis.response_schema(api_key, version)
        _, offset = entity_reader(top.__header_schema__)(payload, 0)
        body, _ = entity_reader(top)(payload, offset)
        return received, payload, body, offset

    def exchange(self, api_key: int, version: int, body: Any, client_id: str) -> Exchange:
        sent, request_size = self.send(api_key, version, body, client_id)
        received, payload, answer, header_size = self.receive(api_key, version)
        return Exchange(sent, received, request_size, len(payload), header_size, answer)

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- building requests -------------------------------------------------------------------------

def record_batch(value_bytes: int) -> bytes:
    """One valid v2 record batch holding one record of `value_bytes` (the broker checks CRCs)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=value_bytes + 1024)
    builder.append(0, timestamp=None, key=None, value=b"q" * value_bytes, headers=[])
    return bytes(builder.build())


def produce_v9(topic: str, records: bytes) -> Any:
    data = schema(apis.PRODUCE, 9, "PartitionProduceData")
    topic_data = schema(apis.PRODUCE, 9, "TopicProduceData")
    return apis.request_schema(apis.PRODUCE, 9)(
        transactional_id=None, acks=1, timeout=timedelta(seconds=10),
        topic_data=(topic_data(name=topic, partition_data=(data(index=0, records=records),)),))


def fetch_v12(topic: str) -> Any:
    """A sessionless Fetch of partition 0 from offset 0 that never waits: the same answer every
    time while the partition does not change."""
    part = schema(apis.FETCH, 12, "FetchPartition")
    top = schema(apis.FETCH, 12, "FetchTopic")
    return apis.request_schema(apis.FETCH, 12)(
        cluster_id=None, replica_id=-1, max_wait=timedelta(0), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1,
        topics=(top(topic=topic, partitions=(part(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(), rack_id="")


def metadata_v12() -> Any:
    """Metadata for no topic: the cheapest request that carries a throttle time."""
    return apis.request_schema(apis.METADATA, 12)(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def create_topics(version: int, topics: list[tuple[str, int]]) -> Any:
    topic = schema(apis.CREATE_TOPICS, version, "CreatableTopic")
    return apis.request_schema(apis.CREATE_TOPICS, version)(
        topics=tuple(topic(name=name, num_partitions=n, replication_factor=1, assignments=(),
                           configs=()) for name, n in topics),
        timeout=timedelta(seconds=10), validate_only=False)


def api_versions() -> bytes:
    """An ApiVersions v3 request frame (size prefix included), to see whether a connection is
    served."""
    top = apis.request_schema(apis.API_VERSIONS, 3)
    header = top.__header_schema__
    payload = _encode(header, header(request_api_key=apis.API_VERSIONS, request_api_version=3,
                                     correlation_id=1, client_id="probe")) + \
        _encode(top, top(client_software_name="raw", client_software_version="1"))
    return struct.pack(">i", len(payload)) + payload


# -- client quotas through the Admin API ---------------------------------------------------------

#: contract entity keys -> Kafka's entity types
ENTITY_TYPES = {"user": "user", "client_id": "client-id", "ip": "ip"}


def alter_client_quotas(conn: RawConnection, entity: dict[str, str],
                        quotas: dict[str, float | None]) -> None:
    """AlterClientQuotas v1: set (or with None remove) `quotas` of one entity."""
    entity_cls = schema(ALTER_CLIENT_QUOTAS, 1, "EntityData")
    entry_cls = schema(ALTER_CLIENT_QUOTAS, 1, "EntryData")
    op_cls = schema(ALTER_CLIENT_QUOTAS, 1, "OpData")
    body = apis.request_schema(ALTER_CLIENT_QUOTAS, 1)(entries=(entry_cls(
        entity=tuple(entity_cls(entity_type=ENTITY_TYPES[k], entity_name=v)
                     for k, v in entity.items()),
        ops=tuple(op_cls(key=key, value=0.0 if value is None else float(value),
                         remove=value is None) for key, value in quotas.items())),),
        validate_only=False)
    answer = conn.exchange(ALTER_CLIENT_QUOTAS, 1, body, "ground-truth-admin").body
    for entry in answer.entries:
        if entry.error_code != ErrorCode.none:
            raise AssertionError(f"AlterClientQuotas {entity}: {entry.error_code.name} "
                                 f"{entry.error_message}")


def describe_client_quotas(conn: RawConnection, entity: dict[str, str]) -> dict[str, float]:
    """The quotas the broker's metadata holds for exactly this entity."""
    component = schema(DESCRIBE_CLIENT_QUOTAS, 1, "ComponentData")
    body = apis.request_schema(DESCRIBE_CLIENT_QUOTAS, 1)(
        components=tuple(component(entity_type=ENTITY_TYPES[k], match_type=0, match=v)
                         for k, v in entity.items()), strict=True)
    answer = conn.exchange(DESCRIBE_CLIENT_QUOTAS, 1, body, "ground-truth-admin").body
    if answer.error_code != ErrorCode.none:
        raise AssertionError(f"DescribeClientQuotas {entity}: {answer.error_code.name}")
    return {v.key: float(v.value) for e in answer.entries or () for v in e.values}


def await_client_quotas(conn: RawConnection, entity: dict[str, str],
                        quotas: dict[str, float | None], timeout_s: float = 15.0) -> None:
    """Until the broker's metadata holds `quotas` for `entity` (None: that quota absent):
    AlterClientQuotas answers once the controller committed, the broker learns it after."""
    want = {k: float(v) for k, v in quotas.items() if v is not None}
    deadline = time.monotonic() + timeout_s
    while True:
        have = describe_client_quotas(conn, entity)
        if {k: have[k] for k in quotas if k in have} == want:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker still has {have} for {entity}, not {want}")
        time.sleep(0.02)
