"""Building Kafka requests and responses for tests, with kio's schemas (the same classes the
gateway decodes with), so each test names the fields it cares about and nothing is hard-coded
as bytes."""

from __future__ import annotations

import io
import struct
import sys
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from app.gateway import apis

NONE = ErrorCode.none


def ms(value: int) -> timedelta:
    return timedelta(milliseconds=value)


def _encode(schema: Any, entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(schema)(buf, entity)
    return buf.getvalue()


def nested(api_key: int, version: int, name: str, response: bool = True) -> Any:
    schema = (apis.response_schema if response else apis.request_schema)(api_key, version)
    return getattr(sys.modules[schema.__module__], name)


def request(api_key: int, version: int, body: Any, correlation_id: int = 7,
            client_id: str = "app") -> bytes:
    """A request payload (header and body, no size prefix)."""
    schema = apis.request_schema(api_key, version)
    header = schema.__header_schema__
    return _encode(header, header(request_api_key=api_key, request_api_version=version,
                                  correlation_id=correlation_id, client_id=client_id)) + \
        _encode(schema, body)


def header_size(api_key: int, version: int, client_id: str) -> int:
    """Bytes of a request header as kio writes it."""
    header = apis.request_schema(api_key, version).__header_schema__
    return len(_encode(header, header(request_api_key=api_key, request_api_version=version,
                                      correlation_id=0, client_id=client_id)))


def request_body(api_key: int, version: int, **fields: Any) -> Any:
    return apis.request_schema(api_key, version)(**fields)


def response(api_key: int, version: int, correlation_id: int = 7, **fields: Any) -> bytes:
    """A response payload (header and body, no size prefix)."""
    schema = apis.response_schema(api_key, version)
    header = schema.__header_schema__
    return _encode(header, header(correlation_id=correlation_id)) + _encode(schema, schema(**fields))


def decode_response(api_key: int, version: int, payload: bytes) -> Any:
    schema = apis.response_schema(api_key, version)
    header, offset = entity_reader(schema.__header_schema__)(payload, 0)
    body, _ = entity_reader(schema)(payload, offset)
    return body


def metadata_response(version: int, brokers: list[tuple[int, str, int]],
                      topics: dict[str, int] | None = None, correlation_id: int = 7) -> bytes:
    """A Metadata response naming `brokers` (id, host, port) and topics with N partitions."""
    broker_cls = nested(apis.METADATA, version, "MetadataResponseBroker")
    topic_cls = nested(apis.METADATA, version, "MetadataResponseTopic")
    part_cls = nested(apis.METADATA, version, "MetadataResponsePartition")
    topic_fields = {f for f in topic_cls.__dataclass_fields__}
    out_topics = []
    for name, n in (topics or {}).items():
        kw: dict[str, Any] = {"error_code": NONE, "name": name, "partitions": tuple(
            part_cls(error_code=NONE, partition_index=i, leader_id=brokers[0][0],
                     **({"replica_nodes": (brokers[0][0],), "isr_nodes": (brokers[0][0],)}))
            for i in range(n))}
        if "topic_id" in topic_fields:
            import uuid
            kw["topic_id"] = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        out_topics.append(topic_cls(**kw))
    fields: dict[str, Any] = {
        "brokers": tuple(broker_cls(node_id=i, host=h, port=p, **({"rack": "r1"} if version >= 1 else {}))
                         for i, h, p in brokers),
        "topics": tuple(out_topics)}
    schema_fields = apis.response_schema(apis.METADATA, version).__dataclass_fields__
    if "throttle_time" in schema_fields:
        fields["throttle_time"] = ms(0)
    if "cluster_id" in schema_fields:
        fields["cluster_id"] = "c1"
    if "controller_id" in schema_fields:
        fields["controller_id"] = brokers[0][0]
    return response(apis.METADATA, version, correlation_id, **fields)


def produce_request(corr: int, acks: int = 1, client_id: str = "app", size: int = 1000) -> bytes:
    data = nested(apis.PRODUCE, 9, "PartitionProduceData", response=False)
    topic = nested(apis.PRODUCE, 9, "TopicProduceData", response=False)
    body = request_body(apis.PRODUCE, 9, transactional_id=None, acks=acks, timeout=ms(1000),
                        topic_data=(topic(name="t", partition_data=(
                            data(index=0, records=b"\x01" * size),)),))
    return request(apis.PRODUCE, 9, body, correlation_id=corr, client_id=client_id)


def produce_response(corr: int) -> bytes:
    part = nested(apis.PRODUCE, 9, "PartitionProduceResponse")
    topic = nested(apis.PRODUCE, 9, "TopicProduceResponse")
    return response(apis.PRODUCE, 9, corr, throttle_time=ms(0), responses=(topic(
        name="t", partition_responses=(part(index=0, error_code=NONE, base_offset=1,
                                            log_append_time=None, record_errors=()),)),))


def old_request(api_key: int, version: int, like: int, body: Any, correlation_id: int = 7,
                client_id: str = "ops", drop_last: int = 0) -> bytes:
    """A request of a version kio has no schema for, written with version `like`'s body (the same
    layout, per Kafka's JSON definitions) minus its last `drop_last` bytes, under a v1 header."""
    raw = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(raw)) + raw
    encoded = _encode(apis.request_schema(api_key, like), body)
    return header + (encoded[:-drop_last] if drop_last else encoded)


def old_mutation_response(results: list[tuple[str, int]], correlation_id: int = 7,
                          messages: bool = False) -> bytes:
    """CreateTopics v0-1 / DeleteTopics v0 results: (name, error code) per topic, and with
    `messages` (CreateTopics v1) a null error message after each; no throttle time."""
    out = struct.pack(">ii", correlation_id, len(results))
    for name, error in results:
        raw = name.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">h", error)
        if messages:
            out += struct.pack(">h", -1)
    return out


def record_batch(size: int) -> bytes:
    """`size` bytes framed as one record batch: base offset, length of the rest, the rest."""
    return struct.pack(">qi", 0, size - 12) + b"\x02" * (size - 12)


def fetch_response(corr: int, nbytes: int = 5000, records: bytes | None = None) -> bytes:
    """A Fetch v12 answer: one partition of `records` (default: one batch of `nbytes`)."""
    part = nested(apis.FETCH, 12, "PartitionData")
    topic = nested(apis.FETCH, 12, "FetchableTopicResponse")
    return response(apis.FETCH, 12, corr, throttle_time=ms(0), error_code=NONE, session_id=0,
                    responses=(topic(topic="t", partitions=(part(
                        partition_index=0, error_code=NONE, high_watermark=1,
                        aborted_transactions=None,
                        records=record_batch(nbytes) if records is None else records),)),))


def fetch_request(corr: int, max_wait: int = 500) -> bytes:
    body = request_body(apis.FETCH, 12, max_wait=ms(max_wait), min_bytes=1, session_id=0,
                        session_epoch=-1, topics=(), forgotten_topics_data=())
    return request(apis.FETCH, 12, body, correlation_id=corr)


def create_topics_request(corr: int, version: int = 7, partitions: int = 4,
                          names: tuple[str, ...] = ("new",)) -> bytes:
    topic = nested(apis.CREATE_TOPICS, version, "CreatableTopic", response=False)
    body = request_body(apis.CREATE_TOPICS, version, timeout=ms(1000), validate_only=False,
                        topics=tuple(topic(name=n, num_partitions=partitions, replication_factor=1,
                                           assignments=(), configs=()) for n in names))
    return request(apis.CREATE_TOPICS, version, body, correlation_id=corr, client_id="ops")


def create_topics_response(corr: int, names: tuple[str, ...], version: int = 7) -> bytes:
    result = nested(apis.CREATE_TOPICS, version, "CreatableTopicResult")
    return response(apis.CREATE_TOPICS, version, corr, throttle_time=ms(0), topics=tuple(
        result(name=n, topic_id=None, error_code=NONE, error_message=None, configs=None)
        for n in names))
