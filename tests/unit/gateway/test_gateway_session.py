"""One client connection through the gateway, with in-memory sockets: what is forwarded, in what
order answers come back, what is throttled and muted, and which usage events are recorded."""

from __future__ import annotations

import pytest

from app.gateway import apis, messages
from app.gateway.frames import frame, request_header
from tests.unit.gateway_harness import BROKER, Clock, Harness, answered, sent, until
from tests.unit.kafka_frames import (
    create_topics_request,
    create_topics_response,
    fetch_request,
    NONE,
    decode_response,
    fetch_response,
    metadata_response,
    ms,
    nested,
    produce_request,
    produce_response,
    record_batch,
    request,
    request_body,
    response,
)


def api_versions_request(corr: int) -> bytes:
    return request(apis.API_VERSIONS, 2, request_body(apis.API_VERSIONS, 2), correlation_id=corr)


def api_versions_response(corr: int) -> bytes:
    ver = nested(apis.API_VERSIONS, 2, "ApiVersion")
    return response(apis.API_VERSIONS, 2, corr, error_code=NONE, throttle_time=ms(0),
                    api_keys=(ver(api_key=0, min_version=0, max_version=11),))


# ----------------------------------------------------------------------------------- order


async def test_a_client_with_a_quota_has_one_request_at_the_broker_at_a_time() -> None:
    h = Harness(max_in_flight=5,
                quotas=[{"entity": {"client_id": "app"}, "quotas": {"producer_byte_rate": 10**9}}])
    h.send(produce_request(1))
    h.send(produce_request(2))
    assert sent(h.broker.frames()) == [1]  # the second waits, as a broker reads it later
    h.answer(produce_response(1))
    assert answered(h.client.frames()) == [1]
    assert sent(h.broker.frames()) == [2]
    h.answer(produce_response(2))
    assert answered(h.client.frames()) == [2]


async def test_a_client_without_a_quota_is_pipelined_up_to_max_in_flight() -> None:
    h = Harness(max_in_flight=2,
                quotas=[{"entity": {"client_id": "other"}, "quotas": {"producer_byte_rate": 1000}}])
    for corr in (1, 2, 3):
        h.send(produce_request(corr))
    assert sent(h.broker.frames()) == [1, 2]
    h.answer(produce_response(1))
    assert sent(h.broker.frames()) == [3]
    h.answer(produce_response(2))
    h.answer(produce_response(3))
    assert answered(h.client.frames()) == [1, 2, 3]


async def test_a_gateway_answer_waits_behind_the_requests_before_it() -> None:
    h = Harness(max_in_flight=2)
    h.throttle("controller_mutation_rate", 3000, client_id="ops")
    h.send(api_versions_request(1))
    h.send(create_topics_request(2))  # strict (v7) under `reject`: answered by the gateway
    assert sent(h.broker.frames()) == [1]
    assert h.client.frames() == []  # not before the ApiVersions answer
    h.answer(api_versions_response(1))
    frames = h.client.frames()
    assert answered(frames) == [1, 2]
    rejected = decode_response(apis.CREATE_TOPICS, 7, frames[1])
    assert [int(t.error_code) for t in rejected.topics] == [89]
    assert 2900 <= rejected.throttle_time.total_seconds() * 1000 <= 3000


async def test_a_permissive_create_topics_is_forwarded_and_charged_from_the_response() -> None:
    h = Harness()
    h.throttle("controller_mutation_rate", 3000, client_id="ops")
    h.send(create_topics_request(5, version=4, partitions=6))  # v4: permissive, never rejected
    assert sent(h.broker.frames()) == [5]
    result = nested(apis.CREATE_TOPICS, 4, "CreatableTopicResult")
    h.answer(response(apis.CREATE_TOPICS, 4, 5, throttle_time=ms(0), topics=(
        result(name="new", error_code=NONE, error_message=None),)))
    (answer,) = h.client.frames()
    assert decode_response(apis.CREATE_TOPICS, 4, answer).throttle_time > ms(2900)
    assert h.session.muted
    (mutation,) = h.events("mutation")
    assert (mutation["api"], mutation["api_version"], mutation["partitions"],
            mutation["client_id"]) == ("CreateTopics", 4, 6, "ops")


async def test_delete_topics_looks_up_the_partitions_it_charges_without_showing_the_client() -> None:
    h = Harness()
    body = request_body(apis.DELETE_TOPICS, 4, timeout=ms(1000), topic_names=("orders",))
    h.send(request(apis.DELETE_TOPICS, 4, body, correlation_id=9, client_id="ops"))
    (lookup,) = h.broker.frames()  # the request waits for the partition counts it charges
    assert request_header(lookup).api_key == apis.METADATA
    h.answer(metadata_response(h.gateway.metadata_version, [(BROKER, "b1", 9092)], {"orders": 12},
                               correlation_id=request_header(lookup).correlation_id))
    assert h.client.frames() == []  # the lookup's answer is the gateway's
    assert sent(h.broker.frames()) == [9]
    result = nested(apis.DELETE_TOPICS, 4, "DeletableTopicResult")
    h.answer(response(apis.DELETE_TOPICS, 4, 9, throttle_time=ms(0),
                      responses=(result(name="orders", error_code=NONE),)))
    assert answered(h.client.frames()) == [9]
    (mutation,) = h.events("mutation")
    assert (mutation["api"], mutation["partitions"]) == ("DeleteTopics", 12)


# -------------------------------------------------------------------------------- throttle


async def test_a_throttled_produce_keeps_its_data_carries_the_throttle_and_mutes() -> None:
    h = Harness()
    h.throttle("producer_byte_rate", 120, client_id="app")
    h.send(produce_request(1))
    h.send(produce_request(2))
    h.broker.frames()
    h.answer(produce_response(1))
    (answer,) = h.client.frames()
    got = decode_response(apis.PRODUCE, 9, answer)
    assert ms(100) <= got.throttle_time <= ms(120) and got.responses
    assert h.session.muted and h.client.paused
    assert h.broker.frames() == []  # request 2 is not read while muted
    await until(lambda: not h.session.muted)
    assert sent(h.broker.frames()) == [2]


async def test_a_throttled_fetch_gets_an_empty_response_and_is_charged_what_it_got() -> None:
    h = Harness()
    h.send(fetch_request(1))
    h.answer(fetch_response(1, nbytes=5000))
    full = h.client.frames()[0]
    h.throttle("consumer_byte_rate", 200, client_id="app")
    h.send(fetch_request(2))
    h.answer(fetch_response(2, nbytes=5000))
    (empty,) = h.client.frames()
    got = decode_response(apis.FETCH, 12, empty)
    assert got.responses == () and got.throttle_time > ms(150)
    fetches = [e for e in h.events() if e["api"] == "Fetch"]
    assert [e["bytes"] for e in fetches] == [len(full), len(empty)]


async def test_a_capped_fetch_is_answered_and_charged_in_whole_record_batches() -> None:
    """A consumer with a quota asks for little (the cap); the batch the broker cut at that limit
    is not passed on, nor charged: the client could not use it."""
    h = Harness(quotas=[{"entity": {"client_id": "app"},
                         "quotas": {"consumer_byte_rate": 1_000_000}}])
    h.send(fetch_request(1))
    (forwarded,) = h.broker.frames()
    asked = messages.fetch_request(forwarded, 12, request_header(forwarded).body)
    assert asked.max_bytes == 20_000  # 1 MB/s x 10 x 100 ms / 50
    h.answer(fetch_response(1, records=record_batch(3000) + record_batch(3000)[:1500]))
    (answer,) = h.client.frames()
    (partition,) = decode_response(apis.FETCH, 12, answer).responses[0].partitions
    assert partition.records == record_batch(3000)
    assert [e["bytes"] for e in h.events() if e["api"] == "Fetch"] == [len(answer)]


async def test_request_quota_throttles_other_apis_in_place() -> None:
    h = Harness()
    h.throttle("request_percentage", 300, client_id="app")
    body = request_body(apis.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False)
    h.send(request(apis.METADATA, 12, body, correlation_id=4))
    h.answer(metadata_response(12, [(BROKER, "b1", 9092)], correlation_id=4))
    (answer,) = h.client.frames()
    got = decode_response(apis.METADATA, 12, answer)
    assert got.throttle_time > ms(250)
    assert [(b.host, b.port) for b in got.brokers] == [("gw", 9193)]


async def test_acks_zero_produce_gets_no_response_and_is_exempt_but_charged_its_bytes() -> None:
    h = Harness()
    payload = produce_request(1, acks=0, size=3000)
    h.send(payload)
    h.send(produce_request(2))
    assert sent(h.broker.frames()) == [1, 2]  # no answer to wait for
    event, _second = h.events()
    assert (event["bytes"], event["exempt"], event["thread_time_ms"]) == (len(payload), True, 0.0)


async def test_a_produce_is_charged_its_size_as_forwarded_and_its_service_time_when_answered(
        ) -> None:
    h = Harness()
    h.gateway.clock = clock = Clock()
    payload = produce_request(1, size=2000)
    h.send(payload)
    (forwarded,) = h.events()  # before any answer
    assert (forwarded["type"], forwarded["api"], forwarded["bytes"], forwarded["user"],
            forwarded["client_id"], forwarded["ip"], forwarded["exempt"], forwarded["count"],
            forwarded["thread_time_ms"]) == (
        "request", "Produce", len(payload), "ANONYMOUS", "app", "10.0.0.7", False, 1, 0.0)
    clock.now += 0.02
    h.answer(produce_response(1))
    (answered_,) = h.events()  # the same request's time: no second request (count 0)
    assert (answered_["api"], answered_["bytes"], answered_["exempt"], answered_["count"]) == (
        "Produce", 0, False, 0)
    assert answered_["thread_time_ms"] == pytest.approx(20.0)


PRODUCE_QUOTA = [{"entity": {"client_id": "app"}, "quotas": {"producer_byte_rate": 10_000}}]


async def test_a_produce_whose_client_left_before_its_answer_is_charged_all_the_same() -> None:
    """Hit and run: the bytes were charged as the request went out, and the broker connection
    stays until its answer, whose time is charged too; then the connection closes."""
    h = Harness(quotas=PRODUCE_QUOTA)
    payload = produce_request(1, size=30_000)
    h.send(payload)
    h.session.lost(False, None)  # the client closes before the answer
    assert not h.session.closed
    assert [(e["bytes"], e["thread_time_ms"]) for e in h.events()] == [(len(payload), 0.0)]
    h.answer(produce_response(1))
    (answer,) = h.events()
    assert answer["api"] == "Produce" and answer["bytes"] == 0
    assert h.session.closed and h.client.frames() == []
    # the next Produce of that client id is throttled by what the one that left sent
    assert h.gateway.request_quota.throttle(BROKER, h.gateway.now_ms(), "PLAINTEXT", "ANONYMOUS",
                                            "app", "10.0.0.7", "Produce", 100, 0.0).ms > 0


async def test_a_fetch_answered_after_its_client_left_is_charged_what_the_broker_sent() -> None:
    h = Harness()
    h.send(fetch_request(1, max_wait=0))
    h.session.lost(False, None)
    answer = fetch_response(1)
    h.answer(answer)
    (event,) = h.events()
    assert (event["api"], event["bytes"]) == ("Fetch", len(answer))
    assert h.session.closed


async def test_what_a_client_sent_but_the_broker_never_saw_is_not_served_once_it_left() -> None:
    """One request at a time for a client with a quota: the second was still in the gateway
    when the client left, so it never reaches the broker (nor is it charged)."""
    h = Harness(quotas=PRODUCE_QUOTA)
    h.session.client_data(frame(produce_request(1)) + frame(produce_request(2)))
    h.session.lost(False, None)
    h.answer(produce_response(1))
    assert sent(h.broker.frames()) == [1]
    assert [e["bytes"] > 0 for e in h.events()] == [True, False]
    assert h.session.closed


async def test_an_answer_the_broker_never_sends_leaves_the_bytes_charged() -> None:
    h = Harness()
    payload = produce_request(1)
    h.send(payload)
    h.session.lost(False, None)
    h.gateway.sweep(h.gateway.clock() + 3600)  # past the request timeout
    assert h.session.closed and h.closed("request_timeout") == 1
    assert [e["bytes"] for e in h.events()] == [len(payload)]


async def test_a_fetch_is_charged_only_the_time_beyond_its_long_poll() -> None:
    h = Harness()
    h.gateway.clock = clock = Clock()
    h.send(fetch_request(1, max_wait=10))
    clock.now += 0.03
    h.answer(fetch_response(1))
    (event,) = h.events()
    assert event["thread_time_ms"] == pytest.approx(20.0)  # 30 ms served, 10 the allowed wait


# ------------------------------------------------------------------------ pass-through, SASL


async def test_a_request_the_gateway_cannot_decode_passes_both_ways_unchanged() -> None:
    h = Harness()
    odd = b"\x03\xe7\x00\x05\x00\x00\x00\x11\x00\x03app" + bytes(range(256)) * 4
    h.send(odd)
    assert h.broker.frames() == [odd]
    reply = b"\x00\x00\x00\x11" + b"\xfe" * 300
    h.answer(reply)
    assert h.client.frames() == [reply]


async def test_an_accepted_connection_is_an_event() -> None:
    h = Harness()
    (event,) = h.events("connection")
    assert (event["ip"], event["listener"], event["inter_broker"]) == ("10.0.0.7", "PLAINTEXT", False)
    assert h.gateway.usage.flush() == []


async def test_bytes_that_are_not_kafka_close_the_connection_and_are_counted() -> None:
    h = Harness()
    h.session.client_data(b"\xff\xff\xff\xf0GET / HTTP/1.1\r\n\r\n")  # a negative size
    assert h.session.closed and h.client.closed
    assert h.session.broker is None  # the broker never saw the connection
    assert h.closed("frame_size") == 1


@pytest.mark.parametrize("first", [b"\x00\x00\x00\x02\x00\x00",  # too short for a header
                                   frame(b"\x00\x00\x00"),  # a header cut short
                                   b"\x00\x10\x00\x00half a frame"])
async def test_a_broker_connection_is_made_for_a_well_formed_first_request_only(
        first: bytes) -> None:
    h = Harness()
    h.session.client_data(first)
    assert h.session.broker is None
    good = Harness()
    good.send(produce_request(1))
    assert good.session.broker is good.broker and good.broker.written  # made, then forwarded


def _sasl(h: Harness, mechanism: str, token: bytes, ok: bool) -> None:
    h.send(request(apis.SASL_HANDSHAKE, 1, request_body(apis.SASL_HANDSHAKE, 1, mechanism=mechanism),
                   correlation_id=1))
    h.answer(response(apis.SASL_HANDSHAKE, 1, 1, error_code=NONE, mechanisms=(mechanism,)))
    h.send(request(apis.SASL_AUTHENTICATE, 2, request_body(apis.SASL_AUTHENTICATE, 2,
                                                           auth_bytes=token), correlation_id=2))
    code = NONE if ok else type(NONE)(58)  # SASL_AUTHENTICATION_FAILED
    h.answer(response(apis.SASL_AUTHENTICATE, 2, 2, error_code=code, error_message=None,
                      auth_bytes=b"", session_lifetime=ms(0)))
    h.client.frames()
    h.broker.frames()


async def test_sasl_plain_names_the_principal_once_the_broker_accepts_it() -> None:
    h = Harness(upstream_sasl=True)
    _sasl(h, "PLAIN", b"\x00alice\x00secret", ok=True)
    h.send(produce_request(3))
    h.answer(produce_response(3))
    events = h.events()
    # the authenticator's requests: not charged; the Produce's bytes, then its time
    assert [e["api"] for e in events] == ["Produce"] * 2
    assert events[0]["user"] == "alice"


async def test_a_request_after_a_refused_authentication_closes_on_a_sasl_listener() -> None:
    h = Harness(upstream_sasl=True)
    _sasl(h, "PLAIN", b"\x00alice\x00secret", ok=False)
    h.send(produce_request(3))
    assert h.session.closed and h.broker.frames() == []  # as the broker's authenticator does
    assert h.closed("unauthenticated_request") == 1


# ---------------------------------------------------------------------- local quotas (engine)


async def test_local_quotas_throttle_the_first_request_over_the_quota_without_a_directive() -> None:
    h = Harness(quotas=[{"entity": {"client_id": "app"}, "quotas": {"producer_byte_rate": 10_000}}])
    throttles = []
    for corr in range(1, 8):  # 11 x 100 ms windows: 10 kB/s allows ~10 kB, each request is ~1 kB
        h.send(produce_request(corr, size=3000))
        h.broker.frames()
        h.answer(produce_response(corr))
        (answer,) = h.client.frames()
        throttles.append(decode_response(apis.PRODUCE, 9, answer).throttle_time)
        if h.session.muted:
            break
    assert throttles[0] == ms(0) and throttles[-1] > ms(0)  # Kafka's own decision, at once
    assert len(throttles) == 4  # ~12 kB sent when the ~10 kB of the window ran out
    # each Produce's usage, charged as it was forwarded, carries the throttle it brought: the
    # workers tell a gateway muting its clients from one whose clients went quiet
    charged = [e for e in h.events() if e["api"] == "Produce" and e["count"] == 1]
    assert [e.get("throttle_ms", 0) for e in charged[:3]] == [0, 0, 0]
    assert charged[3]["throttle_ms"] == round(throttles[-1].total_seconds() * 1000)


async def test_a_throttled_fetchs_usage_carries_its_throttle() -> None:
    h = Harness()
    h.throttle("consumer_byte_rate", 200, client_id="app")
    h.send(fetch_request(1))
    h.answer(fetch_response(1, nbytes=5000))
    (empty,) = h.client.frames()
    throttle = decode_response(apis.FETCH, 12, empty).throttle_time
    (fetch,) = [e for e in h.events() if e["api"] == "Fetch"]
    assert fetch["throttle_ms"] == round(throttle.total_seconds() * 1000) > 150


async def test_a_strict_storm_is_rejected_topic_by_topic_in_request_order() -> None:
    h = Harness(quotas=[{"entity": {"client_id": "ops"}, "quotas": {"controller_mutation_rate": 10}}])
    # bucket: 10/s x 11 x 100 ms = 11 tokens; the first topic (8) fits, it leaves 3; the second
    # (8) is admitted with tokens >= 0 and puts the bucket in debt; the third is rejected
    h.send(create_topics_request(1, partitions=8, names=("a", "b", "c")))
    (forwarded,) = h.broker.frames()
    assert _topic_names(forwarded) == ["a", "b"]
    h.answer(create_topics_response(1, ("a", "b")))
    (answer,) = h.client.frames()
    got = decode_response(apis.CREATE_TOPICS, 7, answer)
    assert [(t.name, int(t.error_code)) for t in got.topics] == [("a", 0), ("b", 0), ("c", 89)]
    assert got.throttle_time > ms(0) and h.session.muted
    assert [e["partitions"] for e in h.events("mutation")] == [8, 8]  # only what was admitted


async def test_a_strict_request_in_debt_is_answered_by_the_gateway_alone() -> None:
    h = Harness(quotas=[{"entity": {"client_id": "ops"}, "quotas": {"controller_mutation_rate": 10}}])
    h.send(create_topics_request(1, partitions=20))
    h.broker.frames()
    h.answer(create_topics_response(1, ("new",)))
    h.client.frames()
    assert not h.session.muted  # strict and admitted: no throttle (KIP-599), but now in debt
    h.send(create_topics_request(2, partitions=1, names=("late",)))
    assert h.broker.frames() == []  # never reaches the controller
    (answer,) = h.client.frames()
    assert [int(t.error_code) for t in decode_response(apis.CREATE_TOPICS, 7, answer).topics] == [89]


def _topic_names(payload: bytes) -> list[str]:
    header = request_header(payload)
    req = messages.mutation_request(header.api_key, header.api_version, payload, header.body)
    return [t.name or "" for t in req.topics]
