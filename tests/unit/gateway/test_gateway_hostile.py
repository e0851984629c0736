"""Hostile clients against one gateway connection, with in-memory sockets: nothing a client sends
turns metering, throttling or address rewriting off. What the gateway cannot decode is still
charged and muted; what it cannot follow closes the connection, counted by reason."""

from __future__ import annotations

import struct
import time
from typing import Any

import orjson
import pytest
from kio.schema.errors import ErrorCode

from app.gateway import apis
from app.gateway.connection import Session
from app.gateway.frames import SIZE, frame, request_header
from app.gateway.limits import MUTATION_TOPICS, PRE_AUTH_FRAME, Limits
from app.intake.records import decode_source
from app.subscriber.active_set import ActiveSet
from app.usage.names import charged_name
from tests.unit.gateway_harness import BROKER, FakeSocket, Harness, answered, sent
from tests.unit.kafka_frames import (
    NONE,
    decode_response,
    fetch_response,
    metadata_response,
    ms,
    nested,
    old_mutation_response,
    old_request,
    produce_request,
    produce_response,
    request,
    request_body,
    response,
)

ILLEGAL_SASL_STATE = ErrorCode(34)  # a broker's answer to SaslHandshake on a listener without SASL
PRODUCE_QUOTA = [{"entity": {"client_id": "app"}, "quotas": {"producer_byte_rate": 10_000}}]


def handshake(version: int, mechanism: str = "PLAIN", corr: int = 1) -> bytes:
    return request(apis.SASL_HANDSHAKE, version, request_body(
        apis.SASL_HANDSHAKE, version, mechanism=mechanism), correlation_id=corr)


def handshake_answer(version: int, error: ErrorCode = NONE, corr: int = 1) -> bytes:
    return response(apis.SASL_HANDSHAKE, version, corr, error_code=error, mechanisms=(
        "PLAIN", "SCRAM-SHA-256", "OAUTHBEARER", "GSSAPI"))


def requests_until_muted(h: Harness, first: int = 10, limit: int = 30) -> int:
    """Produce requests (3 kB each) the client sends, one at a time, until the gateway mutes it."""
    for n, corr in enumerate(range(first, first + limit), start=1):
        h.send(produce_request(corr, size=3000))
        assert sent(h.broker.frames()) == [corr]
        h.answer(produce_response(corr))
        h.client.frames()
        if h.session.muted:
            return n
    raise AssertionError(f"not muted after {limit} requests over the quota")


def label_values(h: Harness, metric: str, label: str) -> set[str]:
    return {sample.labels[label] for family in h.gateway.metrics.registry.collect()
            for sample in family.samples if sample.name == metric}


# ------------------------------------------------------------------------------------ framing


async def test_a_frame_over_the_request_limit_is_refused_on_its_size_prefix() -> None:
    h = Harness(limits=Limits(max_request_bytes=PRE_AUTH_FRAME + 1))
    h.session.client_data(SIZE.pack(PRE_AUTH_FRAME + 2))  # the rest is never waited for
    assert h.session.closed and h.broker.written == b""
    assert h.closed("frame_size") == 1


async def test_a_request_shorter_than_its_header_closes_the_connection() -> None:
    h = Harness()
    h.send(b"\x00\x00\x00\x01\x00")
    assert h.session.closed and h.broker.written == b""
    assert h.closed("bad_header") == 1


async def test_a_frame_whose_header_no_frame_of_its_size_holds_is_refused_on_its_head() -> None:
    """2^28 tagged fields declared by the header of a 16 MiB frame: refused once its first
    bytes are in, not after the 16 MiB were read and held."""
    h = Harness()
    head = struct.pack(">hhih", apis.METADATA, 12, 1, 3) + b"app" + bytes.fromhex("8080808001")
    h.session.client_data(SIZE.pack(len(head) + (16 << 20)) + head + bytes(4096))
    assert h.session.closed and h.broker.written == b""
    assert h.closed("bad_header") == 1


async def test_an_answer_out_of_order_closes_the_connection() -> None:
    h = Harness(max_in_flight=2)
    h.send(produce_request(1))
    h.send(produce_request(2))
    h.answer(produce_response(2))
    assert h.session.closed and h.client.frames() == []
    assert h.closed("broker_protocol") == 1


async def test_unknown_api_keys_are_forwarded_charged_and_share_one_metric_label() -> None:
    h = Harness(max_in_flight=5)
    for key, corr in ((999, 1), (4242, 2), (31000, 3)):
        h.send(struct.pack(">hhih", key, 0, corr, 3) + b"app" + b"\x00" * 40)
    assert sent(h.broker.frames()) == [1, 2, 3]
    for corr in (1, 2, 3):
        h.answer(struct.pack(">i", corr) + b"\x00" * 8)
    assert answered(h.client.frames()) == [1, 2, 3]
    assert sorted(e["api"] for e in h.events()) == ["Api31000", "Api4242", "Api999"]
    assert label_values(h, "quota_streams_gateway_requests_total", "api") == {"unknown"}
    assert label_values(h, "quota_streams_gateway_response_bytes_total", "api") == {"unknown"}


def produce_with_id_length(corr: int, varint: bytes, acks: int) -> bytes:
    """A Produce v9 request whose transactional id has the compact length `varint` and no bytes:
    an empty id to Kafka when the varint reads 1, as `81 80 80 80 10` does."""
    payload = produce_request(corr, acks=acks)
    body = request_header(payload).body
    assert payload[body] == 0  # kio wrote a null id
    return payload[:body] + varint + payload[body + 1:]


async def test_acks_zero_behind_a_five_byte_id_length_is_read_as_kafka_reads_it() -> None:
    """Kafka reads `81 80 80 80 10` as an empty id and stores the records without answering:
    the gateway reads the same acks, charges the bytes and awaits no answer."""
    h = Harness()
    payload = produce_with_id_length(1, bytes.fromhex("8180808010"), acks=0)
    h.send(payload)
    h.send(produce_request(2))
    assert sent(h.broker.frames()) == [1, 2]
    first = h.events()[0]
    assert (first["bytes"], first["exempt"]) == (len(payload), True)


@pytest.mark.parametrize("varint", [
    "818080808001",  # a sixth byte: Kafka refuses the varint
    "828002",  # 32,769 bytes: over Kafka's 0x7fff for a string
    "8040",  # 8,191 bytes: past the frame
    "8080808008",  # -2^31 - 1 wraps to 2^31 - 1 in Kafka's int arithmetic: a length, too long
])
async def test_a_produce_whose_acks_cannot_be_read_as_kafka_reads_them_is_never_forwarded(
        varint: str) -> None:
    h = Harness(quotas=PRODUCE_QUOTA)
    h.send(produce_with_id_length(1, bytes.fromhex(varint), acks=0))
    assert h.session.closed and h.broker.written == b""
    assert h.closed("request_undecodable") == 1
    assert h.events() == []


async def test_a_fetch_whose_sizes_cannot_be_read_is_never_forwarded() -> None:
    h = Harness()
    h.send(struct.pack(">hhih", apis.FETCH, 12, 5, 3) + b"app\x00" + b"\x00" * 9)
    assert h.session.closed and h.broker.written == b""
    assert h.closed("request_undecodable") == 1


async def test_a_32_kib_client_id_is_charged_and_throttled_under_its_bounded_form() -> None:
    """The workers dead-letter names over 1024 characters: a client id that long is charged
    under its bounded form, which its directives name, so it is not out of every quota."""
    long_id = "z" * 32_767  # the longest a Kafka client id can be
    h = Harness()
    h.send(produce_request(1, client_id=long_id))
    h.answer(produce_response(1))
    events = h.events()  # its bytes as forwarded, its time as answered
    assert [(e["client_id"], len(e["client_id"])) for e in events] == \
        [(charged_name(long_id), 1024)] * 2
    batch = {"type": "batch", "v": 1, "broker": BROKER, "events": events}
    assert not decode_source(orjson.dumps(batch), 0).dead  # the workers take it
    h.throttle("producer_byte_rate", 5000, client_id=charged_name(long_id))
    h.send(produce_request(2, client_id=long_id))
    h.answer(produce_response(2))
    assert h.session.muted


# ---------------------------------------------------------------------------------- addresses


@pytest.mark.parametrize("key, version", [
    (apis.METADATA, 14),  # a version whose answer the gateway cannot read to rewrite
    (apis.DESCRIBE_CLUSTER, 3),
    (apis.FIND_COORDINATOR, 7),
    (apis.FETCH, 19),
    (apis.SHARE_FETCH, 1),  # APIs it hides: their answers name brokers it does not rewrite
    (apis.DESCRIBE_QUORUM, 2),
])
async def test_a_request_whose_answer_would_carry_unrewritten_addresses_is_refused(
        key: int, version: int) -> None:
    h = Harness()  # the client ignores the ApiVersions the gateway narrowed
    h.send(struct.pack(">hhih", key, version, 1, 3) + b"app" + b"\x00" * 30)
    assert h.session.closed and h.broker.written == b""
    assert h.closed("unrewritable_request") == 1


async def test_an_address_answer_it_cannot_read_is_never_passed_on() -> None:
    h = Harness()
    body = request_body(apis.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    h.send(request(apis.METADATA, 12, body, correlation_id=4))
    h.answer(metadata_response(12, [(BROKER, "b1", 9092)], correlation_id=4)[:14])  # cut short
    assert h.session.closed and h.client.written == b""
    assert h.closed("broker_protocol") == 1


async def test_a_fetch_answer_whose_leaders_it_cannot_read_is_charged_not_passed_on() -> None:
    h = Harness()
    h.send(request(apis.FETCH, 16, request_body(
        apis.FETCH, 16, max_wait=ms(0), min_bytes=1, session_id=0, session_epoch=-1, topics=(),
        forgotten_topics_data=()), correlation_id=4))
    h.answer(struct.pack(">i", 4) + b"\x00" + b"\xff" * 40)  # no Fetch v16 body
    assert h.session.closed and h.client.written == b""
    assert [e["api"] for e in h.events()] == ["Fetch"]


# ---------------------------------------------------------------------------------- SASL v0


async def test_a_sasl_handshake_v0_the_broker_refuses_leaves_the_client_throttled() -> None:
    plain, attacker = Harness(quotas=PRODUCE_QUOTA), Harness(quotas=PRODUCE_QUOTA)
    attacker.send(handshake(0))
    attacker.answer(handshake_answer(0, ILLEGAL_SASL_STATE))  # a listener without SASL
    assert answered(attacker.client.frames()) == [1]
    attacker.broker.frames()
    assert requests_until_muted(attacker) == requests_until_muted(plain) == 4
    assert [e["bytes"] for e in attacker.events() if e["api"] == "Produce"] == \
        [e["bytes"] for e in plain.events() if e["api"] == "Produce"]


async def test_nothing_after_a_sasl_handshake_is_read_before_the_broker_answers_it() -> None:
    h = Harness(max_in_flight=5, quotas=PRODUCE_QUOTA)
    pipelined = [handshake(0), produce_request(2, size=3000), produce_request(3, size=3000)]
    h.session.client_data(b"".join(frame(f) for f in pipelined))  # one write, before any answer
    assert sent(h.broker.frames()) == [1]
    h.answer(handshake_answer(0, ILLEGAL_SASL_STATE))
    assert sent(h.broker.frames()) == [2]  # Kafka framing: a Produce, held to the quota
    h.answer(produce_response(2))
    assert sent(h.broker.frames()) == [3]
    # each Produce charged its bytes as it was forwarded; the first its time too, once answered
    assert [e["bytes"] for e in h.events() if e["api"] == "Produce"] == \
        [len(pipelined[1]), 0, len(pipelined[2])]


async def test_raw_tokens_pipelined_after_a_refused_handshake_are_read_as_kafka_frames() -> None:
    h = Harness()
    h.session.client_data(frame(handshake(0)) + frame(b"\x00alice\x00secret") +
                          frame(produce_request(3)))
    h.answer(handshake_answer(0, ILLEGAL_SASL_STATE))
    assert h.session.closed  # a PLAIN token is no Kafka request: as a broker, it closes
    assert sent(h.broker.frames()) == [1]
    assert h.closed("bad_header") == 1


async def test_an_accepted_sasl_v0_plain_exchange_names_the_principal_then_kafka_resumes() -> None:
    h = Harness(upstream_sasl=True)
    token = b"\x00alice\x00secret"
    h.session.client_data(frame(handshake(0)) + frame(token) + frame(produce_request(3)))
    assert sent(h.broker.frames()) == [1]
    h.answer(handshake_answer(0))
    assert bytes(h.broker.written) == frame(token)  # the raw token as it came, nothing after it
    h.broker.written.clear()
    h.session.upstream_data(frame(b""))  # PLAIN accepted: the broker's empty token
    assert h.client.frames() == [handshake_answer(0), b""]
    assert sent(h.broker.frames()) == [3]  # Kafka framing again
    h.answer(produce_response(3))
    assert [(e["api"], e["user"]) for e in h.events()] == [("Produce", "alice")] * 2


async def test_a_sasl_v0_scram_exchange_takes_two_round_trips() -> None:
    h = Harness(upstream_sasl=True)
    h.send(handshake(0, "SCRAM-SHA-256"))
    h.answer(handshake_answer(0))
    h.client.frames()
    h.broker.frames()
    exchange = [(b"n,,n=bob,r=nonce", b"r=nonce+server,s=c2FsdA==,i=4096"),
                (b"c=biws,r=nonce+server,p=cHJvb2Y=", b"v=c2lnbmF0dXJl")]
    for client_token, server_token in exchange:
        h.send(client_token)
        assert bytes(h.broker.written) == frame(client_token)
        h.broker.written.clear()
        assert not h.session.auth.authenticated
        h.session.upstream_data(frame(server_token))
        assert h.client.frames() == [server_token]
    assert h.session.auth.authenticated and h.session.user == "bob"
    h.send(produce_request(5))
    assert sent(h.broker.frames()) == [5]


async def test_a_refused_raw_exchange_reaches_the_client_then_closes() -> None:
    h = Harness(upstream_sasl=True)
    h.send(handshake(0, "OAUTHBEARER"))
    h.answer(handshake_answer(0))
    h.client.frames()
    h.send(b"n,,\x01auth=Bearer e30.e30.\x01\x01")
    challenge = b'{"status":"invalid_token"}'
    h.session.upstream_data(frame(challenge))
    assert h.client.frames() == [challenge] and h.session.closed
    assert h.closed("sasl_failed") == 1


async def test_raw_tokens_of_a_mechanism_it_cannot_follow_close_the_connection() -> None:
    h = Harness(upstream_sasl=True)
    h.send(handshake(0, "GSSAPI"))
    h.answer(handshake_answer(0))
    assert h.session.closed and h.closed("sasl_unfollowable") == 1
    refused = Harness()
    refused.send(handshake(0, "GSSAPI"))
    refused.answer(handshake_answer(0, ErrorCode(33)))  # UNSUPPORTED_SASL_MECHANISM
    assert not refused.session.closed  # no raw token follows a refusal


async def test_a_raw_token_is_held_to_the_unauthenticated_frame_limit() -> None:
    h = Harness()  # a listener without SASL would not accept the handshake; this one does
    h.send(handshake(0))
    h.answer(handshake_answer(0))
    h.session.client_data(SIZE.pack(PRE_AUTH_FRAME + 1))
    assert h.session.closed and h.closed("unauthenticated_frame_size") == 1


# ----------------------------------------------------------------------- SASL listener, v1


async def test_before_authentication_only_the_authenticators_requests_are_served() -> None:
    h = Harness(upstream_sasl=True)
    h.send(request(apis.API_VERSIONS, 3, request_body(
        apis.API_VERSIONS, 3, client_software_name="c", client_software_version="1"),
        correlation_id=1))
    assert sent(h.broker.frames()) == [1]
    h.answer(response(apis.API_VERSIONS, 3, 1, error_code=NONE, api_keys=(), throttle_time=ms(0)))
    h.send(request(apis.FETCH, 12, request_body(
        apis.FETCH, 12, max_wait=ms(500), min_bytes=1, session_id=0, session_epoch=-1,
        topics=(), forgotten_topics_data=()), correlation_id=2))
    assert h.session.closed and h.broker.frames() == []  # never forwarded, never decoded
    assert h.closed("unauthenticated_request") == 1


async def test_frames_before_authentication_are_held_to_512_kib_on_their_prefix() -> None:
    h = Harness(upstream_sasl=True)
    h.session.client_data(SIZE.pack(PRE_AUTH_FRAME + 1))
    assert h.session.closed and h.closed("unauthenticated_frame_size") == 1
    h = Harness(upstream_sasl=True)
    _authenticate_v1(h)
    big = produce_request(3, size=PRE_AUTH_FRAME * 2)
    h.send(big)
    assert sent(h.broker.frames()) == [3]


async def test_sasl_frames_are_held_to_512_kib_on_any_listener_other_frames_are_not() -> None:
    h = Harness()
    big = produce_request(3, size=PRE_AUTH_FRAME * 2)  # a first request larger than 512 KiB
    h.send(big)
    assert sent(h.broker.frames()) == [3]
    h.answer(produce_response(3))
    h.session.client_data(SIZE.pack(PRE_AUTH_FRAME + 1) + struct.pack(">h", apis.SASL_AUTHENTICATE))
    assert h.session.closed and h.closed("unauthenticated_frame_size") == 1


async def test_a_pipelined_sasl_v1_exchange_charges_what_follows_to_its_principal() -> None:
    h = Harness(max_in_flight=5, upstream_sasl=True)
    authenticate = request(apis.SASL_AUTHENTICATE, 2, request_body(
        apis.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00secret"), correlation_id=2)
    h.session.client_data(frame(handshake(1)) + frame(authenticate) + frame(produce_request(3)))
    assert sent(h.broker.frames()) == [1]
    h.answer(handshake_answer(1))
    assert sent(h.broker.frames()) == [2]
    h.answer(response(apis.SASL_AUTHENTICATE, 2, 2, error_code=NONE, error_message=None,
                      auth_bytes=b"", session_lifetime=ms(0)))
    assert sent(h.broker.frames()) == [3]
    h.answer(produce_response(3))
    assert [(e["api"], e["user"]) for e in h.events()] == [("Produce", "alice")] * 2


async def test_an_oauthbearer_challenge_without_an_error_code_does_not_authenticate() -> None:
    h = Harness(upstream_sasl=True)
    h.send(handshake(1, "OAUTHBEARER"))
    h.answer(handshake_answer(1))
    payload = b"n,,\x01auth=Bearer e30.eyJzdWIiOiJ2aWN0aW0ifQ.\x01\x01"  # sub: victim
    h.send(request(apis.SASL_AUTHENTICATE, 2, request_body(
        apis.SASL_AUTHENTICATE, 2, auth_bytes=payload), correlation_id=2))
    h.answer(response(apis.SASL_AUTHENTICATE, 2, 2, error_code=NONE, error_message=None,
                      auth_bytes=b'{"status":"invalid_token"}', session_lifetime=ms(0)))
    assert not h.session.auth.authenticated and h.session.user == "ANONYMOUS"


async def test_sasl_requests_are_charged_on_a_listener_without_sasl() -> None:
    h = Harness()
    h.send(handshake(1))
    h.answer(handshake_answer(1, ILLEGAL_SASL_STATE))  # KafkaApis answers it there
    assert [e["api"] for e in h.events()] == ["SaslHandshake"]


def _authenticate_v1(h: Harness) -> None:
    h.send(handshake(1))
    h.answer(handshake_answer(1))
    h.send(request(apis.SASL_AUTHENTICATE, 2, request_body(
        apis.SASL_AUTHENTICATE, 2, auth_bytes=b"\x00alice\x00secret"), correlation_id=2))
    h.answer(response(apis.SASL_AUTHENTICATE, 2, 2, error_code=NONE, error_message=None,
                      auth_bytes=b"", session_lifetime=ms(0)))
    h.client.frames()
    h.broker.frames()


# ---------------------------------------------------------------------------------- mutations


def _create_topics_v2_body(partitions: int, names: tuple[str, ...]) -> Any:
    topic = nested(apis.CREATE_TOPICS, 2, "CreatableTopic", response=False)
    return request_body(apis.CREATE_TOPICS, 2, timeout=ms(1000), validate_only=False, topics=tuple(
        topic(name=n, num_partitions=partitions, replication_factor=1, assignments=(), configs=())
        for n in names))


@pytest.mark.parametrize("version", [0, 1])
async def test_create_topics_v0_and_v1_are_charged_and_throttled(version: int) -> None:
    h = Harness(quotas=[{"entity": {"client_id": "ops"},
                         "quotas": {"controller_mutation_rate": 10}}])
    h.send(old_request(apis.CREATE_TOPICS, version, 2, _create_topics_v2_body(20, ("a", "b")),
                       correlation_id=5, drop_last=1 if version == 0 else 0))
    assert sent(h.broker.frames()) == [5]  # permissive: forwarded, then throttled
    h.answer(old_mutation_response([("a", 0), ("b", 0)], correlation_id=5,
                                   messages=version == 1))
    assert answered(h.client.frames()) == [5]
    assert h.session.muted  # 40 partitions against 10/s: no throttle field to carry it
    assert [(m["api"], m["api_version"], m["partitions"]) for m in h.events("mutation")] == [
        ("CreateTopics", version, 20), ("CreateTopics", version, 20)]


async def test_delete_topics_v0_is_charged_the_partitions_it_deletes() -> None:
    h = Harness()
    body = request_body(apis.DELETE_TOPICS, 1, timeout=ms(1000), topic_names=("orders",))
    h.send(old_request(apis.DELETE_TOPICS, 0, 1, body, correlation_id=9))
    (lookup,) = h.broker.frames()
    h.answer(metadata_response(h.gateway.metadata_version, [(BROKER, "b1", 9092)], {"orders": 12},
                               correlation_id=request_header(lookup).correlation_id))
    assert sent(h.broker.frames()) == [9]
    h.answer(old_mutation_response([("orders", 0)], correlation_id=9))
    assert answered(h.client.frames()) == [9]
    assert [(m["api"], m["partitions"]) for m in h.events("mutation")] == [("DeleteTopics", 12)]


async def test_a_mutation_the_gateway_cannot_read_is_never_forwarded() -> None:
    unknown = Harness()  # a version no schema describes
    payload = bytearray(old_request(apis.CREATE_TOPICS, 2, 2, _create_topics_v2_body(1, ("a",))))
    payload[2:4] = (40).to_bytes(2, "big")
    unknown.send(bytes(payload))
    truncated = Harness()
    truncated.send(old_request(apis.CREATE_TOPICS, 2, 2, _create_topics_v2_body(1, ("a",)))[:-6])
    too_many = Harness()  # a topics array claiming more than the gateway decodes
    too_many.send(struct.pack(">hhih", apis.CREATE_TOPICS, 4, 1, 3) + b"ops" +
                  struct.pack(">i", MUTATION_TOPICS + 1) + b"\x00" * 64)
    for h in (unknown, truncated, too_many):
        assert h.session.closed and h.broker.written == b""
        assert h.closed("mutation_undecodable") == 1


# ------------------------------------------------------------------------------------- Fetch


async def test_a_fetch_claiming_to_be_a_followers_is_throttled_like_a_consumers() -> None:
    h = Harness()
    h.throttle("consumer_byte_rate", 200, client_id="app")
    h.send(request(apis.FETCH, 12, request_body(
        apis.FETCH, 12, replica_id=2, max_wait=ms(0), min_bytes=1, session_id=0,
        session_epoch=-1, topics=(), forgotten_topics_data=()), correlation_id=4))
    h.answer(fetch_response(4, nbytes=5000))
    (empty,) = h.client.frames()
    got = decode_response(apis.FETCH, 12, empty)
    assert got.responses == () and got.throttle_time > ms(150) and h.session.muted
    (event,) = h.events()
    assert (event["exempt"], event["bytes"]) == (False, len(empty))


# ------------------------------------------------------------------------------- timeouts


async def test_a_request_the_broker_leaves_unanswered_closes_after_the_request_timeout() -> None:
    h = Harness(limits=Limits(request_timeout_ms=500, idle_timeout_ms=60_000))
    start = time.perf_counter()
    h.send(produce_request(1))
    h.gateway.sweep(start + 0.4)
    assert not h.session.closed
    h.gateway.sweep(time.perf_counter() + 0.6)
    assert h.session.closed and h.closed("request_timeout") == 1


async def test_an_idle_connection_closes_after_the_idle_timeout_but_not_while_muted() -> None:
    h = Harness(limits=Limits(idle_timeout_ms=1000))
    h.send(produce_request(1))
    h.answer(produce_response(1))
    h.gateway.sweep(h.session.active + 0.9)
    assert not h.session.closed
    h.throttle("producer_byte_rate", 5000, client_id="app")
    h.send(produce_request(2))
    h.answer(produce_response(2))
    assert h.session.muted
    h.gateway.sweep(h.session.active + 1.5)
    assert not h.session.closed  # waiting out its throttle
    idle = Harness(limits=Limits(idle_timeout_ms=1000))
    idle.gateway.sweep(idle.session.active + 1.1)
    assert idle.session.closed and idle.closed("idle") == 1


# ---------------------------------------------------------------------------------- admission


async def test_connections_over_the_caps_are_closed_at_once_and_counted() -> None:
    h = Harness(limits=Limits(max_connections=4, max_connections_per_ip=2))
    gw = h.gateway  # its harness connection, from 10.0.0.7, is the first
    same_ip, others = [FakeSocket(("10.0.0.7", 50001 + i)) for i in range(2)], \
        [FakeSocket((f"10.0.0.{i}", 50000)) for i in range(20, 24)]
    for sock in same_ip + others:
        Session(gw, BROKER).client_made(sock)  # type: ignore[arg-type]
    assert [s.closed for s in same_ip] == [False, True]
    assert [s.closed for s in others] == [False, False, True, True]
    assert len(gw.sessions) == 4 and gw.counts.of("10.0.0.7") == 2
    outcomes = gw.metrics.registry.get_sample_value
    assert outcomes("quota_streams_gateway_connections_total", {"outcome": "over_ip_limit"}) == 1
    assert outcomes("quota_streams_gateway_connections_total", {"outcome": "over_limit"}) == 2
    h.session.close()
    assert len(gw.sessions) == 3 and gw.counts.of("10.0.0.7") == 1


async def test_the_acceptor_queue_is_bounded_while_a_connection_delay_holds_it() -> None:
    h = Harness(limits=Limits(max_queued_connections=2))
    gw = h.gateway
    active: ActiveSet = h.active
    now = gw.now_ms()
    active.apply({"v": 1, "ts": now, "scope": "cluster", "broker": None,
                  "entity": {"broker": str(BROKER)}, "quota": "max_connection_creation_rate",
                  "action": "delay_connection", "throttle_time_ms": 60_000, "until": now + 60_000})
    socks = [FakeSocket((f"10.0.1.{i}", 50000)) for i in range(4)]
    for sock in socks:
        Session(gw, BROKER).client_made(sock)  # type: ignore[arg-type]
    assert [s.closed for s in socks] == [False, False, True, True]  # the first two wait
    assert gw.metrics.registry.get_sample_value(
        "quota_streams_gateway_connections_total", {"outcome": "queue_full"}) == 2
    for session in list(gw.sessions):
        session.close()
