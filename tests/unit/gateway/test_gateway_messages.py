"""The gateway's protocol layer: framing, headers, and each message it decodes or writes, checked
by decoding its output with kio (the schemas of Apache Kafka's message definitions)."""

from __future__ import annotations

import base64
import dataclasses
import struct
import sys
import uuid

import orjson
import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from app.gateway import apis, messages, sasl
from app.gateway.frames import FrameError, FrameReader, correlation_id, frame, request_header
from tests.unit.kafka_frames import (
    record_batch,
    NONE,
    decode_response,
    header_size,
    metadata_response,
    ms,
    nested,
    old_mutation_response,
    old_request,
    request,
    request_body,
    response,
)

GATEWAY = {111: ("gw.example", 9193), 112: ("gw.example", 9194)}
addresses = GATEWAY.get


# ------------------------------------------------------------------------------------ framing


@pytest.mark.parametrize("version", [5, 12])  # request header v1, v2 (tagged fields)
def test_request_header_finds_the_body_of_either_header_version(version: int) -> None:
    body = request_body(apis.METADATA, version, topics=None, allow_auto_topic_creation=False,
                        **({"include_topic_authorized_operations": False} if version >= 8 else {}),
                        **({"include_cluster_authorized_operations": False} if 8 <= version <= 10 else {}))
    payload = request(apis.METADATA, version, body, correlation_id=42, client_id="billing-app")
    header = request_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        apis.METADATA, version, 42, "billing-app")
    assert header.body == header_size(apis.METADATA, version, "billing-app")  # where kio's ends


def test_an_unknown_api_keeps_its_header_fields_and_has_no_known_body() -> None:
    payload = b"\x03\xe7\x00\x01\x00\x00\x00\x05\x00\x02ab" + b"rest"
    header = request_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id,
            header.body) == (999, 1, 5, "ab", -1)


def test_frame_reader_splits_a_stream_cut_anywhere() -> None:
    frames = [b"a" * 3, b"", b"b" * 70_000, b"c"]
    stream = b"".join(frame(f) for f in frames)
    for cut in (1, 3, 5, 4096):
        reader, got = FrameReader(), []
        for i in range(0, len(stream), cut):
            reader.feed(stream[i:i + cut])
            while (f := reader.next()) is not None:
                got.append(f)
        assert got == frames and reader.buffered == 0


def test_frame_reader_refuses_a_frame_over_its_limit_on_its_size_prefix() -> None:
    reader = FrameReader(max_frame=100)
    reader.feed(frame(b"x" * 101)[:4])  # only the prefix: nothing of the frame is waited for
    with pytest.raises(FrameError) as refused:
        reader.next()
    assert refused.value.size == 101
    reader = FrameReader(max_frame=100)
    reader.feed(b"\xff\xff\xff\xfe")
    with pytest.raises(FrameError):
        reader.next()


def test_frame_reader_holds_some_apis_to_a_smaller_limit_read_after_the_prefix() -> None:
    held = frame(request(apis.SASL_HANDSHAKE, 1, request_body(apis.SASL_HANDSHAKE, 1,
                                                              mechanism="P" * 200)))
    other = frame(b"\x00\x00" + b"p" * 300)  # api key 0 (Produce), as large
    reader = FrameReader(max_frame=1000, held_keys=frozenset({apis.SASL_HANDSHAKE}),
                         held_frame=100)
    reader.feed(other[:3])
    assert reader.next() is None
    reader.feed(other[3:])
    assert reader.next() == other[4:]  # over 100 bytes, but not a held api
    reader.feed(held[:5])
    assert reader.next() is None  # its api key is not in yet
    reader.feed(held[5:6])
    with pytest.raises(FrameError) as refused:
        reader.next()
    assert refused.value.size == len(held) - 4


def test_a_frame_whose_prefix_was_read_is_held_to_a_limit_lowered_since() -> None:
    reader = FrameReader(max_frame=1000)
    reader.feed(frame(b"x" * 500)[:10])
    assert not reader.complete()  # its prefix is read
    reader.max_frame = 100
    with pytest.raises(FrameError):
        reader.next()


# ------------------------------------------------------------------------------- api table


def test_made_up_keys_and_versions_grow_no_cache_and_share_one_metric_label() -> None:
    apis.request_schema(apis.PRODUCE, 9)
    before = (apis._request_schema.cache_info().currsize, apis._flexible_request.cache_info().currsize)
    for key in range(1000, 3000):
        assert apis.request_schema(key, 1) is None and apis.flexible_request_header(key, 1) is None
    for version in range(100, 30000, 7):
        assert apis.request_schema(apis.PRODUCE, version) is None
        assert apis.flexible_request_header(apis.PRODUCE, version) is None
        assert not apis.throttle_first(apis.PRODUCE, version)
    after = (apis._request_schema.cache_info().currsize, apis._flexible_request.cache_info().currsize)
    assert after == before
    assert {apis.metric_label(k) for k in (999, 4242, -1)} == {"unknown"}
    assert apis.metric_label(apis.PRODUCE) == "Produce"


@pytest.mark.parametrize("key, version, flexible", [
    (apis.PRODUCE, 2, False),  # below kio's v3, which has the old header: the old header
    (apis.PRODUCE, 14, True),  # above kio's v13, which is flexible: flexible
    (apis.CREATE_TOPICS, 0, False), (apis.DELETE_TOPICS, 0, False),
    (apis.PRODUCE, 9, True), (apis.METADATA, 8, False),
])
def test_header_version_of_a_version_outside_kios_range(key: int, version: int,
                                                         flexible: bool) -> None:
    assert apis.flexible_request_header(key, version) is flexible


# -------------------------------------------------------------------------------- ApiVersions


def test_api_versions_are_narrowed_to_what_the_gateway_can_proxy() -> None:
    ver = nested(apis.API_VERSIONS, 3, "ApiVersion")
    keys = (ver(api_key=apis.PRODUCE, min_version=0, max_version=11),  # kio: 3..13
            ver(api_key=apis.SASL_HANDSHAKE, min_version=0, max_version=1),  # v0 is not framed
            ver(api_key=apis.DESCRIBE_QUORUM, min_version=0, max_version=2),  # addresses: hidden
            ver(api_key=apis.FETCH, min_version=4, max_version=17),
            ver(api_key=999, min_version=0, max_version=3))  # unknown: passed through as is
    payload = response(apis.API_VERSIONS, 3, error_code=NONE, api_keys=keys, throttle_time=ms(0))
    out = decode_response(apis.API_VERSIONS, 3, messages.narrow_api_versions(payload, 3))
    got = {k.api_key: (k.min_version, k.max_version) for k in out.api_keys}
    assert got == {apis.PRODUCE: (3, 11), apis.SASL_HANDSHAKE: (1, 1), apis.FETCH: (4, 17),
                   999: (0, 3)}


# ---------------------------------------------------------------------------------- addresses


@pytest.mark.parametrize("version", [0, 1, 5, 9, 12])
def test_metadata_brokers_point_at_the_gateway_and_nothing_else_changes(version: int) -> None:
    brokers = [(111, "broker-1.internal", 9092), (112, "broker-2.internal", 9092)]
    payload = metadata_response(version, brokers, {"orders": 3, "payments": 12})
    out, nodes = messages.rewrite_metadata(payload, version, addresses)
    assert [(n.node_id, n.host, n.port) for n in nodes] == brokers
    before = decode_response(apis.METADATA, version, payload)
    after = decode_response(apis.METADATA, version, out)
    assert [(b.node_id, b.host, b.port) for b in after.brokers] == [
        (111, "gw.example", 9193), (112, "gw.example", 9194)]
    assert after.topics == before.topics
    if version >= 1:
        assert [b.rack for b in after.brokers] == ["r1", "r1"]


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_a_broker_without_a_gateway_port_is_left_out_of_metadata(version: int) -> None:
    payload = metadata_response(version, [(111, "b1", 9092), (500, "b500", 9092)])
    out, nodes = messages.rewrite_metadata(payload, version, addresses)
    after = decode_response(apis.METADATA, version, out)
    assert [(b.node_id, b.host, b.port) for b in after.brokers] == [(111, "gw.example", 9193)]
    assert [n.node_id for n in nodes] == [111, 500]  # learned as the cluster described them


@pytest.mark.parametrize("version", [2, 4])
def test_find_coordinator_points_at_the_gateway(version: int) -> None:
    if version >= 4:
        coord = nested(apis.FIND_COORDINATOR, version, "Coordinator")
        payload = response(apis.FIND_COORDINATOR, version, throttle_time=ms(0), coordinators=(
            coord(key="g1", node_id=112, host="b2", port=9092, error_code=NONE, error_message=None),
            coord(key="g2", node_id=-1, host="", port=-1, error_code=NONE, error_message=None)))
    else:
        payload = response(apis.FIND_COORDINATOR, version, throttle_time=ms(0), error_code=NONE,
                           error_message=None, node_id=112, host="b2", port=9092)
    out = messages.rewrite_find_coordinator(payload, version, addresses)
    assert out is not None
    got = decode_response(apis.FIND_COORDINATOR, version, out)
    if version >= 4:
        assert [(c.key, c.host, c.port) for c in got.coordinators] == [
            ("g1", "gw.example", 9194), ("g2", "", -1)]
    else:
        assert (got.host, got.port) == ("gw.example", 9194)


def test_describe_cluster_points_at_the_gateway() -> None:
    broker = nested(apis.DESCRIBE_CLUSTER, 1, "DescribeClusterBroker")
    payload = response(apis.DESCRIBE_CLUSTER, 1, throttle_time=ms(0), error_code=NONE,
                       cluster_id="c", controller_id=111,
                       brokers=(broker(broker_id=111, host="b1", port=9092),))
    out = messages.rewrite_describe_cluster(payload, 1, addresses)
    nodes = messages.describe_cluster_brokers(payload, 1)
    assert out is not None and [(n.node_id, n.host) for n in nodes] == [(111, "b1")]
    got = decode_response(apis.DESCRIBE_CLUSTER, 1, out)
    assert [(b.host, b.port) for b in got.brokers] == [("gw.example", 9193)]


@pytest.mark.parametrize("version", [0, 3, 4, 6])
def test_a_coordinator_without_a_gateway_port_is_not_available_rather_than_named(
        version: int) -> None:
    if version >= 4:
        coord = nested(apis.FIND_COORDINATOR, version, "Coordinator")
        payload = response(apis.FIND_COORDINATOR, version, throttle_time=ms(0), coordinators=(
            coord(key="g1", node_id=112, host="b2", port=9092, error_code=NONE, error_message=None),
            coord(key="g3", node_id=500, host="b500", port=9092, error_code=NONE,
                  error_message=None)))
    else:
        fields = {"throttle_time": ms(0), "error_message": None} if version else {}
        payload = response(apis.FIND_COORDINATOR, version, error_code=NONE, node_id=500,
                           host="b500", port=9092, **fields)
    out = messages.rewrite_find_coordinator(payload, version, addresses)
    assert out is not None
    got = decode_response(apis.FIND_COORDINATOR, version, out)
    answers = got.coordinators if version >= 4 else (got,)
    unfronted = answers[-1]
    assert (unfronted.node_id, unfronted.host, unfronted.port, int(unfronted.error_code)) == (
        -1, "", -1, messages.COORDINATOR_NOT_AVAILABLE)
    if version >= 4:
        assert (answers[0].host, answers[0].port) == ("gw.example", 9194)


def test_a_broker_without_a_gateway_port_is_left_out_of_describe_cluster() -> None:
    broker = nested(apis.DESCRIBE_CLUSTER, 1, "DescribeClusterBroker")
    payload = response(apis.DESCRIBE_CLUSTER, 1, throttle_time=ms(0), error_code=NONE,
                       cluster_id="c", controller_id=500,
                       brokers=(broker(broker_id=111, host="b1", port=9092),
                                broker(broker_id=500, host="b500", port=9092)))
    assert [n.node_id for n in messages.describe_cluster_brokers(payload, 1)] == [111, 500]
    out = messages.rewrite_describe_cluster(payload, 1, addresses)
    assert out is not None
    got = decode_response(apis.DESCRIBE_CLUSTER, 1, out)
    assert [(b.broker_id, b.host, b.port) for b in got.brokers] == [(111, "gw.example", 9193)]


def _describe_configs(version: int, resource_type: int, configs: dict[str, str]) -> bytes:
    result = nested(apis.DESCRIBE_CONFIGS, version, "DescribeConfigsResult")
    entry = nested(apis.DESCRIBE_CONFIGS, version, "DescribeConfigsResourceResult")
    synonym = nested(apis.DESCRIBE_CONFIGS, version, "DescribeConfigsSynonym")
    extra = {"config_type": 2, "documentation": None} if version >= 3 else {}
    return response(apis.DESCRIBE_CONFIGS, version, throttle_time=ms(0), results=(result(
        error_code=NONE, error_message=None, resource_type=resource_type, resource_name="1",
        configs=tuple(entry(name=k, value=v, read_only=True, config_source=4, is_sensitive=False,
                            synonyms=(synonym(name=k, value=v, source=4),), **extra)
                      for k, v in configs.items())),))


BROKER_CONFIGS = {
    "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
    "advertised.listeners": "PLAINTEXT://b1:9092",
    "controller.quorum.voters": "1@b1:9093",
    "some.future.endpoint": "b1.internal:19092",
    "num.io.threads": "8",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
}


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_a_brokers_address_configs_are_hidden_as_kafka_hides_a_password(version: int) -> None:
    payload = _describe_configs(version, messages.BROKER_RESOURCE, BROKER_CONFIGS)
    out = messages.hide_config_addresses(payload, version)
    assert out is not None
    (result,) = decode_response(apis.DESCRIBE_CONFIGS, version, out).results
    got = {c.name: (c.value, c.is_sensitive, [s.value for s in c.synonyms])
           for c in result.configs}
    for name in ("listeners", "advertised.listeners", "controller.quorum.voters",
                 "some.future.endpoint"):
        assert got[name] == (None, True, [None])
    assert got["num.io.threads"] == ("8", False, ["8"])
    mapped = BROKER_CONFIGS["listener.security.protocol.map"]
    assert got["listener.security.protocol.map"] == (mapped, False, [mapped])


def test_a_topics_configs_pass_as_they_are() -> None:
    """A topic names no broker; its throttled-replica lists (`0:1,1:2`) are no addresses."""
    payload = _describe_configs(4, 2, {"leader.replication.throttled.replicas": "0:1,1:2"})
    assert messages.hide_config_addresses(payload, 4) is None


def _host_fields(cls: type, seen: set[type]) -> list[str]:
    """The fields named host or port in a kio message class and the classes nested in it."""
    if cls in seen or not dataclasses.is_dataclass(cls):
        return []
    seen.add(cls)
    module = sys.modules[cls.__module__]
    found = []
    for f in dataclasses.fields(cls):
        if f.name in ("host", "port"):
            found.append(f.name)
        for nested_cls in vars(module).values():
            if isinstance(nested_cls, type) and nested_cls.__name__ in str(f.type):
                found += [f"{f.name}.{name}" for name in _host_fields(nested_cls, seen)]
    return found


def test_every_api_whose_answer_names_a_host_is_rewritten_or_hidden() -> None:
    """A new API or version in kio whose response has a host or port field must be rewritten
    (`apis.ADDRESSES`), hidden (`apis.HIDDEN_APIS`) or known to name no broker."""
    from kio.schema.index import api_key_map

    checked = set()
    for key in api_key_map:
        for version in range(apis.MAX_VERSION):
            schema = apis.response_schema(key, version)
            if schema is None or not _host_fields(schema, set()):
                continue
            checked.add(key)
            assert key in apis.HIDDEN_APIS or key in apis.NOT_BROKER_HOSTS or (
                key in apis.ADDRESSES and apis.rewritable(key, version)), (
                apis.api_name(key), version)
    assert {apis.METADATA, apis.FIND_COORDINATOR, apis.DESCRIBE_QUORUM} <= checked


# ---------------------------------------------------------------------------- Produce / Fetch


def _fetch_response(version: int, throttle: int = 0, endpoints: bool = False,
                    hints: tuple[tuple[int, str, int], ...] = ()) -> bytes:
    """Two topics of two partitions each, one with aborted transactions, one without records."""
    part = nested(apis.FETCH, version, "PartitionData")
    topic = nested(apis.FETCH, version, "FetchableTopicResponse")
    aborted = nested(apis.FETCH, version, "AbortedTransaction")
    topics = []
    for name in ("t1", "t2"):
        parts = (part(partition_index=0, error_code=NONE, high_watermark=10, records=b"\x00" * 500,
                      aborted_transactions=(aborted(producer_id=7, first_offset=3),)),
                 part(partition_index=1, error_code=NONE, high_watermark=0, records=None,
                      aborted_transactions=None))
        topics.append(topic(topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions=parts)
                      if version >= 13 else topic(topic=name, partitions=parts))
    fields = {"throttle_time": ms(throttle), "error_code": NONE, "session_id": 77,
              "responses": tuple(topics)}
    if endpoints:
        hints = ((112, "b2", 9092),)
    if version >= 16 and hints:
        node = nested(apis.FETCH, version, "NodeEndpoint")
        fields["node_endpoints"] = tuple(node(node_id=n, host=h, port=p) for n, h, p in hints)
    return response(apis.FETCH, version, **fields)


@pytest.mark.parametrize("version", [11, 12, 17])  # header v0 / v1; v17 decoded for endpoints
def test_fetch_throttle_is_set_in_place_and_the_data_is_kept(version: int) -> None:
    payload = _fetch_response(version)
    out = messages.patch_response(apis.FETCH, version, payload, 1500, addresses)
    assert out is not None and len(out) == len(payload)
    got, before = decode_response(apis.FETCH, version, out), decode_response(apis.FETCH, version, payload)
    assert got.throttle_time == ms(1500) and got.responses == before.responses
    # the broker's own larger throttle wins (max of both)
    own = _fetch_response(version, throttle=3000)
    assert messages.patch_response(apis.FETCH, version, own, 1500, addresses) is None


@pytest.mark.parametrize("version", [16, 17, 18])
def test_fetch_node_endpoints_point_at_the_gateway(version: int) -> None:
    out = messages.patch_response(apis.FETCH, version, _fetch_response(version, endpoints=True),
                                  0, addresses)
    assert out is not None
    got = decode_response(apis.FETCH, version, out)
    assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(112, "gw.example", 9194)]
    # without endpoints (the tag absent, or present and empty) the response is passed on as it is
    assert messages.patch_response(apis.FETCH, version, _fetch_response(version), 0, addresses) is None
    empty_tag = _fetch_response(version)[:-1] + b"\x01\x00\x01\x01"  # 1 tag: 0, 1 byte, []
    assert decode_response(apis.FETCH, version, empty_tag).node_endpoints == ()
    assert messages.patch_response(apis.FETCH, version, empty_tag, 0, addresses) is None


@pytest.mark.parametrize("incremental, session", [(True, 77), (False, 0)])
def test_a_throttled_fetch_gets_an_empty_response(incremental: bool, session: int) -> None:
    out = messages.empty_fetch_response(_fetch_response(12), 12, 800, incremental)
    got = decode_response(apis.FETCH, 12, out)
    assert (got.throttle_time, got.responses, got.session_id) == (ms(800), (), session)


def _produce_response(version: int, endpoints: bool = False,
                      hints: tuple[tuple[int, str, int], ...] = ()) -> bytes:
    part = nested(apis.PRODUCE, version, "PartitionProduceResponse")
    topic = nested(apis.PRODUCE, version, "TopicProduceResponse")
    p = part(index=0, error_code=NONE, base_offset=5, log_append_time=None, record_errors=())
    fields = {"responses": (topic(name="t", partition_responses=(p,)),), "throttle_time": ms(0)}
    if endpoints:
        hints = ((111, "b1", 9092),)
    if hints:
        node = nested(apis.PRODUCE, version, "NodeEndpoint")
        fields["node_endpoints"] = tuple(node(node_id=n, host=h, port=p) for n, h, p in hints)
    return response(apis.PRODUCE, version, **fields)


@pytest.mark.parametrize("version", [9, 11])
def test_produce_throttle_and_endpoints(version: int) -> None:
    payload = _produce_response(version, endpoints=version >= 10)
    out = messages.patch_response(apis.PRODUCE, version, payload, 250, addresses)
    got = decode_response(apis.PRODUCE, version, out)
    assert got.throttle_time == ms(250)
    assert got.responses == decode_response(apis.PRODUCE, version, payload).responses
    if version >= 10:
        assert [(e.host, e.port) for e in got.node_endpoints] == [("gw.example", 9193)]


@pytest.mark.parametrize("api_key, version", [(apis.PRODUCE, 11), (apis.FETCH, 17)])
def test_a_leader_hint_naming_a_broker_without_a_gateway_port_is_left_out(
        api_key: int, version: int) -> None:
    hints = ((111, "b1", 9092), (500, "b500", 9092))
    payload = (_produce_response(version, hints=hints) if api_key == apis.PRODUCE
               else _fetch_response(version, hints=hints))
    out = messages.patch_response(api_key, version, payload, 0, addresses)
    assert out is not None
    got = decode_response(api_key, version, out)
    assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(111, "gw.example", 9193)]


@pytest.mark.parametrize("version, transactional_id", [(3, None), (8, "tx-1"), (9, None), (11, "tx-1")])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_are_read_without_decoding_the_records(version: int, transactional_id: str | None,
                                                           acks: int) -> None:
    data = nested(apis.PRODUCE, version, "PartitionProduceData", response=False)
    topic = nested(apis.PRODUCE, version, "TopicProduceData", response=False)
    body = request_body(apis.PRODUCE, version, transactional_id=transactional_id, acks=acks,
                        timeout=ms(1000), topic_data=(topic(name="t", partition_data=(
                            data(index=0, records=b"\x01" * 100),)),))
    payload = request(apis.PRODUCE, version, body)
    assert messages.produce_acks(payload, version, request_header(payload).body) == acks


def test_produce_acks_of_versions_before_the_transactional_id() -> None:
    for version in (0, 1, 2):  # kio has no schema: acks is the body's first field
        payload = b"\x00\x00" + version.to_bytes(2, "big") + b"\x00\x00\x00\x07\x00\x03app" + \
            b"\x00\x00" + b"\x00\x00\x03\xe8" + b"\x00\x00\x00\x00"
        assert messages.produce_acks(payload, version, request_header(payload).body) == 0


def _fetch(version: int, session_epoch: int, **more: object) -> bytes:
    part = nested(apis.FETCH, version, "FetchPartition", response=False)
    topic = nested(apis.FETCH, version, "FetchTopic", response=False)
    partition = {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1 << 20}
    if version >= 9:
        partition["current_leader_epoch"] = 1
    name = {"topic_id": uuid.uuid4()} if version >= 13 else {"topic": "t"}
    fields: dict[str, object] = {"max_wait": ms(500), "min_bytes": 1, "max_bytes": 50 << 20,
                                 "topics": (topic(**name, partitions=(part(**partition),)),),
                                 **more}
    if version >= 7:
        fields.update(session_id=9, session_epoch=session_epoch, forgotten_topics_data=())
    return request(apis.FETCH, version, request_body(apis.FETCH, version, **fields))


@pytest.mark.parametrize("version", [4, 7, 11, 12, 15, 17, 18])
def test_fetch_request_is_read_and_capped_in_its_fixed_fields(version: int) -> None:
    payload = _fetch(version, session_epoch=3)
    body = request_header(payload).body
    info = messages.fetch_request(payload, version, body)
    assert (info.max_wait_ms, info.incremental, info.max_bytes) == (500, version >= 7, 50 << 20)
    capped, capped_info = messages.cap_fetch(payload, info, 4096)
    schema = apis.request_schema(apis.FETCH, version)
    before, after = (entity_reader(schema)(p, body)[0] for p in (payload, capped))
    assert after == dataclasses.replace(before, max_bytes=4096)
    assert capped_info.capped and capped_info.max_bytes == 4096 and not info.capped


@pytest.mark.parametrize("version", [11, 15])
def test_a_fetch_claiming_to_be_a_followers_reads_like_a_consumers(version: int) -> None:
    if version >= 15:
        state = nested(apis.FETCH, version, "ReplicaState", response=False)
        payload = _fetch(version, 0, replica_state=state(replica_id=2))
    else:
        payload = _fetch(version, 0, replica_id=2)
    info = messages.fetch_request(payload, version, request_header(payload).body)
    assert (info.max_wait_ms, info.incremental) == (500, False)
    assert not hasattr(info, "follower")  # the gateway proxies clients: none is exempt


@pytest.mark.parametrize("version", [3, 19])
def test_fetch_versions_whose_fields_are_not_known_are_not_read(version: int) -> None:
    payload = _fetch(12, 0)
    with pytest.raises(messages.MessageError):
        messages.fetch_request(payload, version, request_header(payload).body)


# ------------------------------------------------------------------------------- mutations


def _create_topics(version: int, topics: dict[str, int], validate_only: bool = False) -> bytes:
    topic = nested(apis.CREATE_TOPICS, version, "CreatableTopic", response=False)
    body = request_body(apis.CREATE_TOPICS, version, timeout=ms(1000), validate_only=validate_only,
                        topics=tuple(topic(name=n, num_partitions=p, replication_factor=1,
                                           assignments=(), configs=()) for n, p in topics.items()))
    return request(apis.CREATE_TOPICS, version, body, correlation_id=31)


@pytest.mark.parametrize("version", [4, 7])
def test_create_topics_request_and_its_rejection(version: int) -> None:
    payload = _create_topics(version, {"a": 3, "b": 10}, validate_only=True)
    req = messages.mutation_request(apis.CREATE_TOPICS, version, payload, request_header(payload).body)
    assert (req.api, req.validate_only, [(t.name, t.partitions) for t in req.topics]) == (
        "CreateTopics", True, [("a", 3), ("b", 10)])
    out = messages.reject_mutation(apis.CREATE_TOPICS, version, 31, req, 4200)
    assert correlation_id(out) == 31
    got = decode_response(apis.CREATE_TOPICS, version, out)
    assert got.throttle_time == ms(4200)
    assert [(t.name, int(t.error_code)) for t in got.topics] == [("a", 89), ("b", 89)]


@pytest.mark.parametrize("version", [4, 6])
def test_delete_topics_request_and_its_rejection(version: int) -> None:
    topic_id = uuid.uuid4()
    if version >= 6:
        state = nested(apis.DELETE_TOPICS, version, "DeleteTopicState", response=False)
        body = request_body(apis.DELETE_TOPICS, version, timeout=ms(1000), topics=(
            state(name="a", topic_id=None), state(name=None, topic_id=topic_id)))
    else:
        body = request_body(apis.DELETE_TOPICS, version, timeout=ms(1000), topic_names=("a", "b"))
    payload = request(apis.DELETE_TOPICS, version, body)
    req = messages.mutation_request(apis.DELETE_TOPICS, version, payload, request_header(payload).body)
    expected = [("a", None), (None, topic_id)] if version >= 6 else [("a", None), ("b", None)]
    assert [(t.name, t.topic_id) for t in req.topics] == expected
    got = decode_response(apis.DELETE_TOPICS, version,
                          messages.reject_mutation(apis.DELETE_TOPICS, version, 7, req, 900))
    assert [int(r.error_code) for r in got.responses] == [89, 89]
    if version >= 6:
        assert got.responses[1].topic_id == topic_id


@pytest.mark.parametrize("version", [1, 3])
def test_create_partitions_request_and_its_rejection(version: int) -> None:
    topic = nested(apis.CREATE_PARTITIONS, version, "CreatePartitionsTopic", response=False)
    body = request_body(apis.CREATE_PARTITIONS, version, timeout=ms(1000), validate_only=False,
                        topics=(topic(name="a", count=8, assignments=None),))
    payload = request(apis.CREATE_PARTITIONS, version, body)
    req = messages.mutation_request(apis.CREATE_PARTITIONS, version, payload, request_header(payload).body)
    assert [(t.name, t.partitions) for t in req.topics] == [("a", 8)]
    got = decode_response(apis.CREATE_PARTITIONS, version,
                          messages.reject_mutation(apis.CREATE_PARTITIONS, version, 7, req, 900))
    assert [(r.name, int(r.error_code)) for r in got.results] == [("a", 89)]


@pytest.mark.parametrize("version", [0, 1])
def test_create_topics_v0_and_v1_are_read_with_v2s_layout(version: int) -> None:
    topic = nested(apis.CREATE_TOPICS, 2, "CreatableTopic", response=False)
    assignment = nested(apis.CREATE_TOPICS, 2, "CreatableReplicaAssignment", response=False)
    body = request_body(apis.CREATE_TOPICS, 2, timeout=ms(1000), validate_only=False, topics=(
        topic(name="a", num_partitions=6, replication_factor=1, assignments=(), configs=()),
        topic(name="b", num_partitions=-1, replication_factor=-1, configs=(), assignments=tuple(
            assignment(partition_index=i, broker_ids=(1,)) for i in range(3)))))
    payload = old_request(apis.CREATE_TOPICS, version, 2, body, drop_last=1 if version == 0 else 0)
    header = request_header(payload)
    assert messages.mutation_topic_count(apis.CREATE_TOPICS, version, payload, header.body) == 2
    req = messages.mutation_request(apis.CREATE_TOPICS, version, payload, header.body)
    assert [(t.name, t.partitions) for t in req.topics] == [("a", 6), ("b", 3)]
    results = messages.mutation_results(apis.CREATE_TOPICS, version, old_mutation_response(
        [("a", 0), ("b", 36)], messages=version == 1))
    assert [(r.name, r.error_code, r.partitions) for r in results] == [("a", 0, -1), ("b", 36, -1)]


def test_delete_topics_v0_is_read_with_v1s_layout() -> None:
    body = request_body(apis.DELETE_TOPICS, 1, timeout=ms(1000), topic_names=("a", "b"))
    payload = old_request(apis.DELETE_TOPICS, 0, 1, body)
    header = request_header(payload)
    req = messages.mutation_request(apis.DELETE_TOPICS, 0, payload, header.body)
    assert [t.name for t in req.topics] == ["a", "b"]
    results = messages.mutation_results(apis.DELETE_TOPICS, 0, old_mutation_response([("a", 0)]))
    assert [(r.name, r.error_code) for r in results] == [("a", 0)]


def test_a_truncated_old_mutation_response_is_a_message_error() -> None:
    with pytest.raises(messages.MessageError):
        messages.mutation_results(apis.DELETE_TOPICS, 0, old_mutation_response([("a", 0)])[:-1])
    with pytest.raises(messages.MessageError):
        messages.mutation_results(apis.DELETE_TOPICS, 0, struct.pack(">ii", 7, 2**30))


def test_create_topics_results_give_the_partitions_created() -> None:
    result = nested(apis.CREATE_TOPICS, 7, "CreatableTopicResult")
    payload = response(apis.CREATE_TOPICS, 7, throttle_time=ms(0), topics=(
        result(name="a", topic_id=None, error_code=NONE, error_message=None, num_partitions=6,
               configs=None),
        result(name="b", topic_id=None, error_code=ErrorCode.topic_already_exists,
               error_message="exists", configs=None)))
    got = messages.mutation_results(apis.CREATE_TOPICS, 7, payload)
    assert [(r.name, r.error_code, r.partitions) for r in got] == [("a", 0, 6), ("b", 36, -1)]


@pytest.mark.parametrize("version", [4, 12])
def test_partition_counts_lookup(version: int) -> None:
    payload = messages.metadata_request(version, -1, "gw", ["orders", "gone"])
    header = request_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id) == (apis.METADATA, version, -1)
    answer = metadata_response(version, [(111, "b1", 9092)], {"orders": 6})
    by_name, by_id = messages.topic_partition_counts(answer, version)
    assert by_name == {"orders": 6}
    assert list(by_id.values()) == ([6] if version >= 10 else [])


# ------------------------------------------------------------------------------------- SASL


def test_sasl_usernames_from_each_mechanism() -> None:
    assert sasl.username("PLAIN", b"\x00alice\x00secret") == "alice"
    assert sasl.username("PLAIN", b"admin\x00alice\x00secret") == "alice"
    assert sasl.username("SCRAM-SHA-256", b"n,,n=bob=2Cjr=3D,r=abc123") == "bob,jr="
    assert sasl.username("SCRAM-SHA-512", b"n,a=carol,n=carol,r=x") == "carol"
    claims = base64.urlsafe_b64encode(orjson.dumps({"sub": "svc-etl"})).rstrip(b"=")
    token = b"eyJhbGciOiJub25lIn0." + claims + b"."
    assert sasl.username("OAUTHBEARER", b"n,,\x01auth=Bearer " + token + b"\x01\x01") == "svc-etl"


@pytest.mark.parametrize("mechanism, auth", [
    ("PLAIN", b"no-nul-bytes"), ("PLAIN", b"\x00\x00pw"), ("SCRAM-SHA-256", b"garbage"),
    ("SCRAM-SHA-256", b"\xff\xfe"), ("OAUTHBEARER", b"n,,\x01auth=Bearer not-a-jwt\x01\x01"),
    ("GSSAPI", b"\x60\x82"),
])
def test_sasl_names_it_cannot_read_are_none(mechanism: str, auth: bytes) -> None:
    assert sasl.username(mechanism, auth) is None


def test_sasl_answers_say_whether_the_broker_accepted() -> None:
    for version in (0, 1):
        for code, accepted in ((NONE, True), (ErrorCode(34), False)):
            payload = response(apis.SASL_HANDSHAKE, version, error_code=code, mechanisms=("PLAIN",))
            assert messages.sasl_handshake_accepted(payload, version) is accepted
    payload = response(apis.SASL_AUTHENTICATE, 2, error_code=NONE, error_message=None,
                       auth_bytes=b"v=abc", session_lifetime=ms(0))
    assert messages.sasl_authenticate_answer(payload, 2) == (True, b"v=abc")


def test_undecodable_responses_raise_message_error_for_pass_through() -> None:
    with pytest.raises(messages.MessageError):
        messages.rewrite_metadata(b"\x00\x00\x00\x07\x00\x00\x00\x00\xff\xff\xff", 4, addresses)
    with pytest.raises(messages.MessageError):
        messages.narrow_api_versions(b"\x00\x00\x00\x07\x00", 3)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 17])
def test_a_fetch_answer_is_cut_after_its_last_whole_record_batch(version: int) -> None:
    """What a broker cut at max_bytes goes; whole batches, other partitions and fields stay."""
    part = nested(apis.FETCH, version, "PartitionData")
    topic = nested(apis.FETCH, version, "FetchableTopicResponse")
    cut = record_batch(300) + record_batch(200) + record_batch(400)[:150]
    parts = tuple(part(partition_index=i, error_code=NONE, high_watermark=10, records=records,
                       aborted_transactions=None)
                  for i, records in enumerate((cut, record_batch(100), None)))
    name = {"topic_id": uuid.uuid4()} if version >= 13 else {"topic": "t"}
    fields = {"throttle_time": ms(5), "error_code": NONE, "session_id": 77,
              "responses": (topic(**name, partitions=parts),)}
    known = apis.response_schema(apis.FETCH, version).__dataclass_fields__
    payload = response(apis.FETCH, version, **{k: v for k, v in fields.items() if k in known})
    out = messages.whole_batches(payload, version)
    assert out is not None
    before, after = (decode_response(apis.FETCH, version, p) for p in (payload, out))
    assert [p.records for p in after.responses[0].partitions] == [
        record_batch(300) + record_batch(200), record_batch(100), None]
    assert dataclasses.replace(after, responses=()) == dataclasses.replace(before, responses=())
    assert messages.whole_batches(out, version) is None  # nothing left to cut
