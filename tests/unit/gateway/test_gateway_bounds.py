"""Requests the gateway hands to kio are walked first within their bounds, as Kafka reads them:
kio allocates an array's capacity from the count it reads and reads a five-byte varint whole,
so a count no frame can hold, or one Kafka reads otherwise, must never reach it (it aborted the
gateway's process)."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from app.gateway import apis, messages
from app.gateway.bounds import BoundsError, check_request
from app.gateway.frames import request_header
from tests.unit.kafka_frames import ms, nested, request, request_body


def create_topics(version: int) -> bytes:
    topic = nested(apis.CREATE_TOPICS, version, "CreatableTopic", response=False)
    assignment = nested(apis.CREATE_TOPICS, version, "CreatableReplicaAssignment", response=False)
    config = nested(apis.CREATE_TOPICS, version, "CreatableTopicConfig", response=False)
    return request(apis.CREATE_TOPICS, version, request_body(
        apis.CREATE_TOPICS, version, timeout=ms(1000), validate_only=False, topics=(topic(
            name="orders", num_partitions=-1, replication_factor=-1,
            assignments=(assignment(partition_index=0, broker_ids=(1, 2)),),
            configs=(config(name="retention.ms", value="1000"),)),)))


@pytest.mark.parametrize("version", [2, 4, 5, 7])
def test_a_valid_request_walks_to_its_end(version: int) -> None:
    payload = create_topics(version)
    body = request_header(payload).body
    check_request(apis.request_schema(apis.CREATE_TOPICS, version), payload, body)
    request_ = messages.mutation_request(apis.CREATE_TOPICS, version, payload, body)
    assert [(t.name, t.partitions) for t in request_.topics] == [("orders", 1)]


def _with_broker_ids_count(version: int, count: bytes) -> bytes:
    """The request with its assignment's broker id count replaced by `count`."""
    payload = create_topics(version)
    ids = b"\x03\x00\x00\x00\x01\x00\x00\x00\x02" if version >= 5 else \
        b"\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x02"
    at = payload.index(ids)
    return payload[:at] + count + payload[at + len(ids) - 8:]


@pytest.mark.parametrize("version, count", [
    (7, "ffffffff7f"),  # kio: 2^35 - 1 broker ids (256 GiB); Kafka: -1, a null it refuses
    (7, "8180808010"),  # kio: 2^32 + 1; Kafka: 1
    (7, "8080808001"),  # 2^28: a count no frame of this size holds
    (4, "7fffffff"),  # int32 2^31 - 1
])
def test_a_nested_count_kio_would_allocate_for_is_refused_before_kio(version: int,
                                                                     count: str) -> None:
    payload = _with_broker_ids_count(version, bytes.fromhex(count))
    body = request_header(payload).body
    with pytest.raises(BoundsError):
        check_request(apis.request_schema(apis.CREATE_TOPICS, version), payload, body)
    with pytest.raises(messages.MessageError):
        messages.mutation_request(apis.CREATE_TOPICS, version, payload, body)


def test_a_string_over_kafkas_limit_is_refused() -> None:
    payload = create_topics(4)
    at = payload.index(b"\x00\x06orders")
    long = payload[:at] + struct.pack(">h", -2) + payload[at + 2:]
    with pytest.raises(BoundsError):
        check_request(apis.request_schema(apis.CREATE_TOPICS, 4), long, request_header(long).body)


def test_a_schema_with_a_known_tagged_field_is_refused_whole() -> None:
    """kio decodes a known tagged field's content itself, unwalked: refused, whatever it holds
    (no request the gateway hands to kio has one)."""
    tagged = dataclasses.make_dataclass("Tagged", [
        ("count", int, dataclasses.field(metadata={"kafka_type": "int32"})),
        ("hint", int, dataclasses.field(metadata={"kafka_type": "int32", "tag": 0}))],
        namespace={"__flexible__": True}, frozen=True)

    with pytest.raises(BoundsError, match="tagged field"):
        check_request(tagged, b"\x00\x00\x00\x01\x00", 0)
