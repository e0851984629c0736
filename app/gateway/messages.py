"""The few Kafka messages the gateway decodes or writes, with `kio`.

Each function takes a frame payload (header and body, no size prefix) and returns the new payload,
or None when nothing had to change, so the caller forwards the original bytes: a large message the
gateway does not change is never re-encoded. Decoding is kio's (native, fast); encoding is kio's
pure-Python writer, used only for small messages (ApiVersions, FindCoordinator, DescribeCluster,
rejections, an empty Fetch response) or rare ones (a response carrying new leader endpoints).
Metadata responses can be large, so their brokers array alone is rewritten in place.

Any decode failure raises `MessageError`; the caller then passes the frame through untouched
(still charged), or refuses it where it must read the message to charge it (mutations).
"""

from __future__ import annotations

import dataclasses
import io
import re
import struct
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from app.gateway import apis
from app.gateway.bounds import BoundsError, check_request
from app.gateway.frames import (
    MAX_STRING,
    FrameError,
    read_compact_length,
    read_uvarint,
    response_body_offset,
    skip_tagged_fields,
)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

#: Where the gateway sends clients for a node: node id -> (host, port), or None when the gateway
#: has no port for it: such a broker is left out of every answer (a client is never handed a
#: broker's own address, which would take it around the gateway).
Addresses = Callable[[int], tuple[str, int] | None]

THROTTLING_QUOTA_EXCEEDED = 89
REJECT_MESSAGE = "The throttling quota has been exceeded (quota-streams gateway)."


class MessageError(ValueError):
    """A message the gateway cannot decode; it is passed through as it is."""


def _decode(schema: Any, payload: bytes, offset: int) -> Any:
    try:
        entity, _size = entity_reader(schema)(payload, offset)
    except Exception as exc:  # kio raises KeyError, ValueError, struct.error, ... on bad input
        raise MessageError(f"{schema.__name__}: {exc!r}") from None
    return entity


def _encode(schema: Any, entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(schema)(buf, entity)
    return buf.getvalue()


def _nested(schema: Any, name: str) -> Any:
    """A nested class of a message version (e.g. `CreatableTopicResult` of CreateTopics v5)."""
    return getattr(sys.modules[schema.__module__], name)


def _body_offset(api_key: int, version: int, payload: bytes) -> int:
    try:
        offset = response_body_offset(api_key, version, payload)
    except FrameError as exc:
        raise MessageError(str(exc)) from None
    if offset < 0:
        raise MessageError(f"unknown response {api_key} v{version}")
    return offset


def _response(api_key: int, version: int, payload: bytes) -> tuple[Any, Any, int]:
    schema = apis.response_schema(api_key, version)
    if schema is None:
        raise MessageError(f"no schema for response {api_key} v{version}")
    offset = _body_offset(api_key, version, payload)
    return schema, _decode(schema, payload, offset), offset


def _request(api_key: int, version: int, payload: bytes, body: int) -> Any:
    """A client's request decoded by kio, once it was walked within its bounds as Kafka reads
    it (`bounds`): kio must never see a count it would read otherwise, or allocate for."""
    schema = apis.request_schema(api_key, version)
    if schema is None or body < 0:
        raise MessageError(f"no schema for request {api_key} v{version}")
    try:
        check_request(schema, payload, body)
    except BoundsError as exc:
        raise MessageError(f"{schema.__name__}: {exc}") from None
    return _decode(schema, payload, body)


def throttle(ms: int) -> timedelta:
    return timedelta(milliseconds=max(0, min(ms, 2**31 - 1)))


def response_header(correlation_id: int, flexible: bool) -> bytes:
    return _I32.pack(correlation_id) + (b"\x00" if flexible else b"")


# ---------------------------------------------------------------------------------- ApiVersions


def narrow_api_versions(payload: bytes, version: int,
                        supported: Mapping[int, tuple[int, int]] = apis.DECODED,
                        hidden: Iterable[int] = apis.HIDDEN_APIS) -> bytes:
    """The broker's ApiVersions answer cut to what the gateway can proxy: APIs it decodes keep
    the versions both sides know, APIs that hand out addresses it does not rewrite are removed,
    every other API is offered as the broker offers it (passed through as bytes)."""
    schema, resp, offset = _response(apis.API_VERSIONS, version, payload)
    if resp.error_code != ErrorCode.none:
        return payload  # e.g. UNSUPPORTED_VERSION: the client retries with what the broker says
    drop = set(hidden)
    keys = []
    for item in resp.api_keys:
        if item.api_key in drop:
            continue
        window = supported.get(item.api_key)
        if window is not None:
            low, high = max(item.min_version, window[0]), min(item.max_version, window[1])
            if low > high:
                continue
            item = dataclasses.replace(item, min_version=low, max_version=high)
        keys.append(item)
    return payload[:offset] + _encode(schema, dataclasses.replace(resp, api_keys=tuple(keys)))


def api_version_ranges(payload: bytes, version: int) -> dict[int, tuple[int, int]]:
    """The (min, max) version per API key of an ApiVersions response."""
    _schema, resp, _offset = _response(apis.API_VERSIONS, version, payload)
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}


# ------------------------------------------------------------------------- broker addresses


def _read_string(buf: bytes, pos: int, compact: bool) -> tuple[str | None, int]:
    if compact:
        n, pos = read_compact_length(buf, pos)
    else:
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise FrameError("truncated string")
    return buf[pos:pos + n].decode("utf-8", "replace"), pos + n


def _write_string(value: str | None, compact: bool) -> bytes:
    if value is None:
        return b"\x00" if compact else _I16.pack(-1)
    raw = value.encode()
    return (_uvarint(len(raw) + 1) if compact else _I16.pack(len(raw))) + raw


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@dataclasses.dataclass(frozen=True, slots=True)
class Node:
    """A broker as the cluster describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


def metadata_brokers(payload: bytes, version: int) -> tuple[list[Node], int, int]:
    """The brokers array of a Metadata response: (nodes, start, end) byte offsets of the array."""
    offset = _body_offset(apis.METADATA, version, payload)
    flexible = version >= 9
    pos = offset + (4 if version >= 3 else 0)  # throttle_time_ms
    start = pos
    try:
        if flexible:
            count, pos = read_compact_length(payload, pos)
        else:
            (count,) = _I32.unpack_from(payload, pos)
            pos += 4
        nodes = []
        for _ in range(max(count, 0)):
            (node_id,) = _I32.unpack_from(payload, pos)
            host, pos = _read_string(payload, pos + 4, flexible)
            (port,) = _I32.unpack_from(payload, pos)
            pos += 4
            rack = None
            if version >= 1:
                rack, pos = _read_string(payload, pos, flexible)
            if flexible:
                pos = skip_tagged_fields(payload, pos)
            nodes.append(Node(node_id, host or "", port, rack))
    except (struct.error, FrameError) as exc:
        raise MessageError(f"Metadata v{version} brokers: {exc}") from None
    return nodes, start, pos


def rewrite_metadata(payload: bytes, version: int, addresses: Addresses) -> tuple[bytes, list[Node]]:
    """Point every broker of a Metadata response at the gateway, leaving out those it has no
    port for (their partitions' leaders then name a broker the client does not know, which
    clients treat as a leader not available); returns the new payload and the brokers as the
    cluster described them. Only the brokers array is re-encoded."""
    nodes, start, end = metadata_brokers(payload, version)
    flexible = version >= 9
    fronted = [(node, address) for node in nodes if (address := addresses(node.node_id))]
    parts = [_uvarint(len(fronted) + 1) if flexible else _I32.pack(len(fronted))]
    for node, (host, port) in fronted:
        parts.append(_I32.pack(node.node_id) + _write_string(host, flexible) + _I32.pack(port))
        if version >= 1:
            parts.append(_write_string(node.rack, flexible))
        if flexible:
            parts.append(b"\x00")
    return payload[:start] + b"".join(parts) + payload[end:], nodes


#: What a coordinator the gateway cannot front is answered as (clients ask again later).
COORDINATOR_NOT_AVAILABLE = 15
UNFRONTED_MESSAGE = "The coordinator is not reachable through the quota-streams gateway."


def rewrite_find_coordinator(payload: bytes, version: int, addresses: Addresses) -> bytes | None:
    """FindCoordinator: host/port (v0-v3) or each of `coordinators` (v4+) point at the gateway; a
    coordinator it has no port for is answered COORDINATOR_NOT_AVAILABLE, with no address."""
    schema, resp, offset = _response(apis.FIND_COORDINATOR, version, payload)
    if version >= 4:
        coordinators = tuple(_coordinator(c, addresses) for c in resp.coordinators)
        if coordinators == resp.coordinators:
            return None
        resp = dataclasses.replace(resp, coordinators=coordinators)
    else:
        new = _coordinator(resp, addresses)
        if new is resp:
            return None
        resp = new
    return payload[:offset] + _encode(schema, resp)


def _coordinator(item: Any, addresses: Addresses) -> Any:
    new = _readdress(item, "node_id", addresses)
    if new is not None:
        return new
    message = {"error_message": UNFRONTED_MESSAGE} if hasattr(item, "error_message") else {}
    return dataclasses.replace(item, node_id=-1, host="", port=-1,
                               error_code=ErrorCode(COORDINATOR_NOT_AVAILABLE), **message)


def describe_cluster_brokers(payload: bytes, version: int) -> list[Node]:
    """The brokers of a DescribeCluster response, as the cluster describes them."""
    _schema, resp, _offset = _response(apis.DESCRIBE_CLUSTER, version, payload)
    return [Node(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers]


def rewrite_describe_cluster(payload: bytes, version: int, addresses: Addresses) -> bytes | None:
    """DescribeCluster: every broker points at the gateway; those it cannot front left out."""
    schema, resp, offset = _response(apis.DESCRIBE_CLUSTER, version, payload)
    brokers = _readdressed(resp.brokers, "broker_id", addresses)
    if brokers == resp.brokers:
        return None
    return payload[:offset] + _encode(schema, dataclasses.replace(resp, brokers=brokers))


def _readdress(item: Any, id_field: str, addresses: Addresses) -> Any | None:
    """`item` pointing at the gateway's port for its node; None when the gateway has none."""
    node_id = getattr(item, id_field)
    if node_id < 0:
        return item  # "no coordinator" (-1) and the like carry no address to rewrite
    mapped = addresses(node_id)
    if mapped is None:
        return None
    if (item.host, item.port) == mapped:
        return item
    return dataclasses.replace(item, host=mapped[0], port=mapped[1])


def _readdressed(items: Iterable[Any], id_field: str, addresses: Addresses) -> tuple[Any, ...]:
    """Every item pointing at the gateway; those it cannot front left out."""
    return tuple(new for item in items if (new := _readdress(item, id_field, addresses)))


#: Broker configs whose values are addresses: the listeners and the KRaft quorum's.
ADDRESS_CONFIGS: frozenset[str] = frozenset({
    "listeners", "advertised.listeners", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers",
})
#: A value that names a port (`host:9092`, `PLAINTEXT://:9092`, `1@host:9093`): hidden too, so a
#: config that names a broker under another name never passes either.
_NAMES_PORT = re.compile(r":\d{1,5}(?!\d)")
#: DescribeConfigs' resource type of a broker (a topic's configs name no broker).
BROKER_RESOURCE = 4


def _names_address(name: str, value: str | None) -> bool:
    return name in ADDRESS_CONFIGS or (value is not None and _NAMES_PORT.search(value) is not None)


def hide_config_addresses(payload: bytes, version: int) -> bytes | None:
    """DescribeConfigs (v1-4): a broker's configs that name addresses (its listeners, the
    quorum's, any value naming a port) hidden as Kafka hides a password, value null and
    `is_sensitive` set, in the config and its synonyms. None when nothing is hidden."""
    schema, resp, offset = _response(apis.DESCRIBE_CONFIGS, version, payload)
    changed = False
    results = []
    for result in resp.results:
        if int(result.resource_type) == BROKER_RESOURCE and result.configs:
            configs = tuple(_hide_address(c) for c in result.configs)
            if configs != result.configs:
                result = dataclasses.replace(result, configs=configs)
                changed = True
        results.append(result)
    if not changed:
        return None
    return payload[:offset] + _encode(schema, dataclasses.replace(resp, results=tuple(results)))


def _hide_address(config: Any) -> Any:
    synonyms = config.synonyms or ()
    if not (_names_address(config.name, config.value)
            or any(_names_address(s.name, s.value) for s in synonyms)):
        return config
    return dataclasses.replace(config, value=None, is_sensitive=True, synonyms=tuple(
        dataclasses.replace(s, value=None) for s in synonyms))


# --------------------------------------------------------------------------- Produce / Fetch


def produce_acks(payload: bytes, version: int, body: int) -> int:
    """The `acks` of a Produce request, read as Kafka's `ProduceRequestData.read` reads the
    fields before it, without decoding its records: the transactional id's length (an int16, or
    from v9 a compact length read as Kafka's 32-bit varint), null when negative, refused over
    Kafka's 0x7fff or past the frame. Whether an answer will come depends on it, so it must be
    the value the broker acts on."""
    if body < 0:
        raise MessageError(f"Produce v{version}: fields not known")
    if version < 3:  # v0-2 start with acks
        try:
            return int(_I16.unpack_from(payload, body)[0])
        except struct.error as exc:
            raise MessageError(f"Produce v{version}: {exc}") from None
    try:
        if version >= 9:
            n, pos = read_compact_length(payload, body)
        else:
            (n,) = _I16.unpack_from(payload, body)
            pos = body + 2
        if n > MAX_STRING or pos + max(n, 0) > len(payload):
            raise FrameError(f"a transactional id of {n} bytes")
        return int(_I16.unpack_from(payload, pos + max(n, 0))[0])
    except (struct.error, FrameError) as exc:
        raise MessageError(f"Produce v{version}: {exc}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class FetchRequestInfo:
    """What the gateway needs of a Fetch request: all of it in the fixed fields before the
    topics, so a request is never decoded, whatever it lists."""

    max_wait_ms: int
    incremental: bool  # part of an existing fetch session (epoch > 0)
    max_bytes: int
    max_bytes_at: int  # offset of max_bytes in the payload
    capped: bool = False  # max_bytes lowered by the gateway (`cap_fetch`)


#: Fetch v4-14 start with replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, and
#: from v7 session_id, session_epoch; v15-18 moved replica_id into a tagged field (at the end).
_FETCH_4 = struct.Struct(">iiiib")
_FETCH_7 = struct.Struct(">iiiibii")
_FETCH_15 = struct.Struct(">iiibii")


def fetch_request(payload: bytes, version: int, body: int) -> FetchRequestInfo:
    """A Fetch request's wait, session and size, from its fixed fields (v4-18)."""
    if not 4 <= version <= 18 or body < 0:
        raise MessageError(f"Fetch v{version}: fields not known")
    try:
        if version >= 15:
            max_wait, _min, max_bytes, _iso, _session, epoch = _FETCH_15.unpack_from(payload, body)
            at = body + 8
        elif version >= 7:
            _replica, max_wait, _min, max_bytes, _iso, _session, epoch = _FETCH_7.unpack_from(
                payload, body)
            at = body + 12
        else:
            _replica, max_wait, _min, max_bytes, _iso = _FETCH_4.unpack_from(payload, body)
            epoch, at = -1, body + 12
    except struct.error as exc:
        raise MessageError(f"Fetch v{version}: {exc}") from None
    return FetchRequestInfo(max_wait, version >= 7 and epoch > 0, max_bytes, at)


def cap_fetch(payload: bytes, info: FetchRequestInfo, max_bytes: int) -> tuple[bytes, FetchRequestInfo]:
    """A Fetch request asking for at most `max_bytes` (the field set in place), and its info."""
    return (payload[:info.max_bytes_at] + _I32.pack(max_bytes) + payload[info.max_bytes_at + 4:],
            dataclasses.replace(info, max_bytes=max_bytes, capped=True))


def patch_response(api_key: int, version: int, payload: bytes, throttle_ms: int,
                   addresses: Addresses) -> bytes | None:
    """A response with `throttle_time_ms = max(its own, throttle_ms)` and, for Produce v10+ and
    Fetch v16+, its `node_endpoints` pointed at the gateway. None when nothing changes.

    Most responses start with throttle_time_ms and are patched in place; Produce's comes after
    its partition results and is re-encoded (Produce responses are small)."""
    if api_key == apis.PRODUCE:
        return _patch_produce(version, payload, throttle_ms, addresses)
    out: bytes | None = None
    if api_key == apis.FETCH and version >= 16:
        out = _fetch_endpoints(version, payload, addresses)
    if throttle_ms > 0 and apis.throttle_first(api_key, version):
        base = out if out is not None else payload
        offset = _body_offset(api_key, version, base)
        if len(base) < offset + 4:
            raise MessageError("response shorter than throttle_time_ms")
        (own,) = _I32.unpack_from(base, offset)
        if throttle_ms > own:
            out = base[:offset] + _I32.pack(min(throttle_ms, 2**31 - 1)) + base[offset + 4:]
    return out


def _patch_produce(version: int, payload: bytes, throttle_ms: int,
                   addresses: Addresses) -> bytes | None:
    if throttle_ms <= 0 and version < 10:
        return None
    schema, resp, offset = _response(apis.PRODUCE, version, payload)
    new = resp
    if version >= 10 and resp.node_endpoints:
        new = dataclasses.replace(new, node_endpoints=_readdressed(resp.node_endpoints, "node_id",
                                                                   addresses))
    if throttle_ms > resp.throttle_time.total_seconds() * 1000:
        new = dataclasses.replace(new, throttle_time=throttle(throttle_ms))
    if new is resp:
        return None
    return payload[:offset] + _encode(schema, new)


def _fetch_endpoints(version: int, payload: bytes, addresses: Addresses) -> bytes | None:
    if not _fetch_names_endpoints(version, payload):
        return None
    schema, resp, offset = _response(apis.FETCH, version, payload)
    endpoints = _readdressed(resp.node_endpoints, "node_id", addresses)
    return payload[:offset] + _encode(schema, dataclasses.replace(resp, node_endpoints=endpoints))


_PARTITION_HEAD = 4 + 2 + 8 + 8 + 8  # index, error code, high watermark, LSO, log start offset


def _fetch_names_endpoints(version: int, payload: bytes) -> bool:
    """Whether a flexible Fetch response (v12+) names brokers in `node_endpoints` (top-level tag
    0), found by walking its structure without reading records: a megabyte response is not
    decoded (or copied) to learn that it names none, which is nearly always."""
    try:
        pos = _body_offset(apis.FETCH, version, payload) + 4 + 2 + 4  # throttle, error, session
        topics, pos = read_uvarint(payload, pos)
        for _ in range(topics - 1):
            pos += 16 if version >= 13 else 0  # topic id
            if version < 13:
                n, pos = read_uvarint(payload, pos)
                pos += n - 1
            partitions, pos = read_uvarint(payload, pos)
            for _ in range(partitions - 1):
                pos += _PARTITION_HEAD
                aborted, pos = read_uvarint(payload, pos)
                for _ in range(aborted - 1):
                    pos = skip_tagged_fields(payload, pos + 16)
                pos += 4  # preferred read replica
                size, pos = read_uvarint(payload, pos)
                pos = skip_tagged_fields(payload, pos + max(size - 1, 0))
            pos = skip_tagged_fields(payload, pos)
        count, pos = read_uvarint(payload, pos)
        for _ in range(count):
            tag, pos = read_uvarint(payload, pos)
            size, pos = read_uvarint(payload, pos)
            if tag == 0:  # node_endpoints: a compact array, often sent empty
                return read_uvarint(payload, pos)[0] > 1
            pos += size
    except FrameError as exc:
        raise MessageError(f"Fetch v{version}: {exc}") from None
    return False


def whole_batches(payload: bytes, version: int) -> bytes | None:
    """A Fetch response with each partition's records cut after its last whole record batch
    (None: nothing to cut). A broker fills `max_bytes` and cuts the last batch wherever the limit
    falls (`LogSegment.read`); a client drops that partial batch and fetches it again. Fine with a
    client's usual megabytes; with the small fetches the gateway asks for a consumer under a
    quota it is a fifth of every response, bytes charged that the client cannot use. Decoded
    and re-encoded: such responses are small (`LocalQuotas.fetch_cap`)."""
    schema, resp, offset = _response(apis.FETCH, version, payload)
    changed = False
    topics = []
    for topic in resp.responses:
        partitions = []
        for part in topic.partitions:
            records = part.records
            if records:
                keep = _whole_batch_bytes(records)
                if keep != len(records):
                    part = dataclasses.replace(part, records=type(records)(records[:keep]))
                    changed = True
            partitions.append(part)
        topics.append(dataclasses.replace(topic, partitions=tuple(partitions)))
    if not changed:
        return None
    return payload[:offset] + _encode(schema, dataclasses.replace(resp, responses=tuple(topics)))


def _whole_batch_bytes(records: bytes) -> int:
    """Bytes of the whole batches `records` starts with. Every message format starts a batch
    (or a v0/v1 message) with an 8-byte offset and a 4-byte length of what follows."""
    pos = 0
    while pos + 12 <= len(records):
        (length,) = _I32.unpack_from(records, pos + 8)
        end = pos + 12 + length
        if length < 0 or end > len(records):
            break
        pos = end
    return pos


def empty_fetch_response(payload: bytes, version: int, throttle_ms: int, incremental: bool) -> bytes:
    """What a broker sends a throttled consumer instead of data (KIP-219: `getThrottledResponse`):
    no partitions, `throttle_time_ms` set. An incremental session keeps its id, so its next
    request still fits; a full fetch gets session 0, as Kafka's, and starts over. Only the
    response's header and session id are read, not its records."""
    schema = apis.response_schema(apis.FETCH, version)
    if schema is None:
        raise MessageError(f"no schema for Fetch v{version}")
    offset = _body_offset(apis.FETCH, version, payload)
    fields: dict[str, Any] = {"throttle_time": throttle(throttle_ms), "responses": ()}
    if version >= 7:
        if len(payload) < offset + 10:
            raise MessageError("Fetch response shorter than its session id")
        (session,) = _I32.unpack_from(payload, offset + 6)
        fields["error_code"] = ErrorCode.none
        fields["session_id"] = session if incremental else 0
    return payload[:offset] + _encode(schema, schema(**fields))


# ------------------------------------------------------------------------- mutations (KIP-599)


@dataclasses.dataclass(frozen=True, slots=True)
class MutationTopic:
    """One topic of a CreateTopics/DeleteTopics/CreatePartitions request."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: int  # CreateTopics: asked for (-1: broker default); CreatePartitions: new total


@dataclasses.dataclass(frozen=True, slots=True)
class MutationRequest:
    api: str  # contract name
    topics: tuple[MutationTopic, ...]
    validate_only: bool


#: Old mutation versions kio has no schema for, read with a version whose request has the same
#: layout (Kafka's JSON definitions): CreateTopics v1 is v2's request, v0 is v1's without
#: validateOnly, its last field (read as v2 with a false byte appended); DeleteTopics v0 is v1's.
OLD_MUTATIONS: dict[tuple[int, int], tuple[int, bytes]] = {
    (apis.CREATE_TOPICS, 0): (2, b"\x00"), (apis.CREATE_TOPICS, 1): (2, b""),
    (apis.DELETE_TOPICS, 0): (1, b""),
}


def mutation_topic_count(api_key: int, version: int, payload: bytes, body: int) -> int:
    """How many topics a mutation request lists, read from its first field (every mutation
    request starts with its topics array) without decoding it."""
    flexible = apis.flexible_request_header(api_key, version)
    if flexible is None or body < 0:
        raise MessageError(f"no schema for request {api_key} v{version}")
    try:
        if flexible:
            return read_compact_length(payload, body)[0]
        return int(_I32.unpack_from(payload, body)[0])
    except (struct.error, FrameError) as exc:
        raise MessageError(f"{apis.api_name(api_key)} v{version}: {exc}") from None


def mutation_request(api_key: int, version: int, payload: bytes, body: int) -> MutationRequest:
    old = OLD_MUTATIONS.get((api_key, version))
    if old is not None:
        req = _request(api_key, old[0], payload + old[1], body)
    else:
        req = _request(api_key, version, payload, body)
    if api_key == apis.CREATE_TOPICS:
        topics = tuple(MutationTopic(t.name, None, len(t.assignments) if t.assignments
                                     else int(t.num_partitions)) for t in req.topics)
        return MutationRequest("CreateTopics", topics, bool(getattr(req, "validate_only", False)))
    if api_key == apis.DELETE_TOPICS:
        if version >= 6:
            topics = tuple(MutationTopic(t.name, t.topic_id, 0) for t in req.topics)
        else:
            topics = tuple(MutationTopic(name, None, 0) for name in req.topic_names)
        return MutationRequest("DeleteTopics", topics, False)
    if api_key == apis.CREATE_PARTITIONS:
        topics = tuple(MutationTopic(t.name, None, int(t.count)) for t in req.topics)
        return MutationRequest("CreatePartitions", topics, bool(req.validate_only))
    raise MessageError(f"not a mutation API: {api_key}")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicResult:
    name: str | None
    topic_id: uuid.UUID | None
    error_code: int
    partitions: int  # CreateTopics v5+: the partitions created; -1 when the response does not say


def mutation_results(api_key: int, version: int, payload: bytes) -> list[TopicResult]:
    """Per-topic outcome of a mutation response, in response order."""
    if (api_key, version) in OLD_MUTATIONS:
        return _old_mutation_results(api_key, version, payload)
    _schema, resp, _offset = _response(api_key, version, payload)
    if api_key == apis.CREATE_TOPICS:
        return [TopicResult(t.name, getattr(t, "topic_id", None), int(t.error_code),
                            int(getattr(t, "num_partitions", -1))) for t in resp.topics]
    if api_key == apis.DELETE_TOPICS:
        return [TopicResult(t.name, getattr(t, "topic_id", None), int(t.error_code), -1)
                for t in resp.responses]
    return [TopicResult(t.name, None, int(t.error_code), -1) for t in resp.results]


def _old_mutation_results(api_key: int, version: int, payload: bytes) -> list[TopicResult]:
    """The results of CreateTopics v0-1 and DeleteTopics v0, read by hand: no throttle time, then
    (name, error code) per topic, and CreateTopics v1 an error message after each."""
    pos = _body_offset(api_key, version, payload)
    message = api_key == apis.CREATE_TOPICS and version == 1
    try:
        (count,) = _I32.unpack_from(payload, pos)
        pos += 4
        if not 0 <= count <= len(payload):
            raise MessageError(f"{count} results")
        out = []
        for _ in range(count):
            name, pos = _read_string(payload, pos, False)
            (error,) = _I16.unpack_from(payload, pos)
            pos += 2
            if message:
                _message, pos = _read_string(payload, pos, False)
            out.append(TopicResult(name, None, int(error), -1))
    except (struct.error, FrameError) as exc:
        raise MessageError(f"{apis.api_name(api_key)} v{version} response: {exc}") from None
    return out


def _rejections(schema: Any, api_key: int, topics: Iterable[MutationTopic]) -> list[Any]:
    """Result entries saying THROTTLING_QUOTA_EXCEEDED for `topics`, in a response version's
    own classes."""
    error = ErrorCode(THROTTLING_QUOTA_EXCEEDED)
    name = {apis.CREATE_TOPICS: "CreatableTopicResult", apis.DELETE_TOPICS: "DeletableTopicResult",
            apis.CREATE_PARTITIONS: "CreatePartitionsTopicResult"}[api_key]
    result = _nested(schema, name)
    fields = {f.name for f in dataclasses.fields(result)}
    items = []
    for t in topics:
        kw: dict[str, Any] = {"name": t.name, "error_code": error}
        if "topic_id" in fields:
            kw["topic_id"] = t.topic_id
        if "error_message" in fields:
            kw["error_message"] = REJECT_MESSAGE
        if "configs" in fields:
            kw["configs"] = None
        items.append(result(**kw))
    return items


_RESULTS = {apis.CREATE_TOPICS: "topics", apis.DELETE_TOPICS: "responses",
            apis.CREATE_PARTITIONS: "results"}


def reject_mutation(api_key: int, version: int, correlation_id: int, request: MutationRequest,
                    throttle_ms: int) -> bytes:
    """The response a broker sends a strict mutation request while its quota is in debt: every
    topic THROTTLING_QUOTA_EXCEEDED, nothing forwarded to the controller."""
    schema = apis.response_schema(api_key, version)
    if schema is None or api_key not in _RESULTS:
        raise MessageError(f"no mutation response schema {api_key} v{version}")
    flexible = bool(apis.flexible_response_header(api_key, version))
    body = schema(throttle_time=throttle(throttle_ms),
                  **{_RESULTS[api_key]: tuple(_rejections(schema, api_key, request.topics))})
    return response_header(correlation_id, flexible) + _encode(schema, body)


def keep_topics(api_key: int, version: int, payload: bytes, body: int, keep: list[int]) -> bytes:
    """A mutation request with only the topics at indexes `keep` (the others were rejected)."""
    schema = apis.request_schema(api_key, version)
    req = _request(api_key, version, payload, body)
    field = "topic_names" if api_key == apis.DELETE_TOPICS and version < 6 else "topics"
    topics = getattr(req, field)
    return payload[:body] + _encode(schema, dataclasses.replace(
        req, **{field: tuple(topics[i] for i in keep)}))


def add_rejections(api_key: int, version: int, payload: bytes, request: MutationRequest,
                   rejected: Iterable[int], throttle_ms: int) -> bytes:
    """The broker's answer to the admitted topics, with the rejected ones put back in request
    order as THROTTLING_QUOTA_EXCEEDED, and the larger throttle of the two."""
    schema, resp, offset = _response(api_key, version, payload)
    rejected = set(rejected)
    answered = iter(getattr(resp, _RESULTS[api_key]))
    refusals = iter(_rejections(schema, api_key, [request.topics[i] for i in sorted(rejected)]))
    merged = []
    for i in range(len(request.topics)):
        item = next(refusals if i in rejected else answered, None)
        if item is not None:
            merged.append(item)
    merged.extend(answered)  # anything the broker added beyond the request, kept
    own = int(resp.throttle_time.total_seconds() * 1000)
    return payload[:offset] + _encode(schema, dataclasses.replace(
        resp, throttle_time=throttle(max(own, throttle_ms)), **{_RESULTS[api_key]: tuple(merged)}))


# ------------------------------------------------------------------- internal Metadata lookups


def metadata_request(version: int, correlation_id: int, client_id: str,
                     names: Iterable[str], topic_ids: Iterable[uuid.UUID] = ()) -> bytes:
    """A Metadata request for some topics (by name, or by id from v10), no auto-creation."""
    schema = apis.request_schema(apis.METADATA, version)
    if schema is None:
        raise MessageError(f"no schema for Metadata v{version}")
    topic_cls = _nested(schema, "MetadataRequestTopic")
    fields = {f.name for f in dataclasses.fields(topic_cls)}
    topics = [topic_cls(name=n, **({"topic_id": None} if "topic_id" in fields else {}))
              for n in names]
    if "topic_id" in fields:
        topics += [topic_cls(name=None, topic_id=t) for t in topic_ids]
    kwargs: dict[str, Any] = {"topics": tuple(topics)}
    for f in dataclasses.fields(schema):  # no auto-creation, no authorized operations
        if f.name != "topics" and f.default is dataclasses.MISSING:
            kwargs[f.name] = False
    body = _encode(schema, schema(**kwargs))
    header_cls = schema.__header_schema__
    head = _encode(header_cls, header_cls(request_api_key=apis.METADATA, request_api_version=version,
                                          correlation_id=correlation_id, client_id=client_id))
    return head + body


def topic_partition_counts(payload: bytes, version: int) -> tuple[dict[str, int], dict[uuid.UUID, int]]:
    """Partition counts per topic name and per topic id of a Metadata response (found topics)."""
    _schema, resp, _offset = _response(apis.METADATA, version, payload)
    by_name: dict[str, int] = {}
    by_id: dict[uuid.UUID, int] = {}
    for t in resp.topics:
        if t.error_code != ErrorCode.none:
            continue
        if t.name:
            by_name[t.name] = len(t.partitions)
        topic_id = getattr(t, "topic_id", None)
        if topic_id:
            by_id[topic_id] = len(t.partitions)
    return by_name, by_id


# ---------------------------------------------------------------------------------------- SASL


def sasl_mechanism(payload: bytes, version: int, body: int) -> str:
    """The mechanism a SaslHandshake request asks for."""
    return str(_request(apis.SASL_HANDSHAKE, version, payload, body).mechanism)


def sasl_auth_bytes(payload: bytes, version: int, body: int) -> bytes:
    """The client's token in a SaslAuthenticate request."""
    return bytes(_request(apis.SASL_AUTHENTICATE, version, payload, body).auth_bytes)


def sasl_handshake_accepted(payload: bytes, version: int) -> bool:
    """True when a SaslHandshake response carries no error."""
    _schema, resp, _offset = _response(apis.SASL_HANDSHAKE, version, payload)
    return bool(resp.error_code == ErrorCode.none)


def sasl_authenticate_answer(payload: bytes, version: int) -> tuple[bool, bytes]:
    """Whether a SaslAuthenticate response carries no error, and the server's token in it."""
    _schema, resp, _offset = _response(apis.SASL_AUTHENTICATE, version, payload)
    return bool(resp.error_code == ErrorCode.none), bytes(resp.auth_bytes)


#: Kafka's SASL_AUTHENTICATION_FAILED, what a broker answers an exchange it refuses with.
SASL_AUTHENTICATION_FAILED = 58


def sasl_authenticate_error(version: int, correlation_id: int, message: str) -> bytes:
    """A SaslAuthenticate response refusing the exchange, as a broker's authenticator sends one
    before it closes the connection."""
    schema = apis.response_schema(apis.SASL_AUTHENTICATE, version)
    if schema is None:
        raise MessageError(f"no schema for SaslAuthenticate v{version}")
    fields = {f.name for f in dataclasses.fields(schema)}
    body = schema(error_code=ErrorCode(SASL_AUTHENTICATION_FAILED), error_message=message,
                  auth_bytes=b"",
                  **({"session_lifetime": timedelta(0)} if "session_lifetime" in fields else {}))
    flexible = bool(apis.flexible_response_header(apis.SASL_AUTHENTICATE, version))
    return response_header(correlation_id, flexible) + _encode(schema, body)
