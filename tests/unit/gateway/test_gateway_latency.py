"""The latency the gateway adds per request (`quota_streams_gateway_added_latency_seconds{api}`):
its own time from reading a request to writing it to the broker and from the broker's answer to
writing it to the client; never the broker's time, nor a request's wait behind the broker or a
throttle. Timed on an injected clock that moves only where the test moves it."""

from __future__ import annotations

import pytest

from app.gateway.frames import frame
from tests.unit.gateway_harness import Clock, FakeSocket, Harness, answered, sent
from tests.unit.kafka_frames import produce_request, produce_response

BROKER_WRITE_S = 0.002  # what writing a request to the broker's socket costs the gateway
CLIENT_WRITE_S = 0.001  # and writing a response to the client's
BROKER_S = 5.0  # the broker's own time per request


def timed(h: Harness) -> Clock:
    """The harness's gateway on a test clock; each socket write takes its time on it."""
    clock = Clock()
    h.gateway.clock = clock

    def costs(socket: FakeSocket, seconds: float) -> None:
        write = socket.write

        def timed_write(data: bytes) -> None:
            clock.now += seconds
            write(data)
        socket.write = timed_write  # type: ignore[method-assign]

    costs(h.broker, BROKER_WRITE_S)
    costs(h.client, CLIENT_WRITE_S)
    return clock


def latency(h: Harness, api: str = "Produce") -> tuple[float, float]:
    """(count, sum in seconds) of the histogram for `api`."""
    get = h.gateway.metrics.registry.get_sample_value
    name = "quota_streams_gateway_added_latency_seconds"
    return (get(f"{name}_count", {"api": api}) or 0.0, get(f"{name}_sum", {"api": api}) or 0.0)


async def test_the_brokers_time_is_not_the_gateways() -> None:
    h = Harness()
    clock = timed(h)
    h.send(produce_request(1))
    assert sent(h.broker.frames()) == [1]
    clock.now += BROKER_S
    h.answer(produce_response(1))
    assert answered(h.client.frames()) == [1]
    count, total = latency(h)
    assert count == 1
    assert total == pytest.approx(BROKER_WRITE_S + CLIENT_WRITE_S)


async def test_a_request_waiting_for_the_broker_to_answer_the_one_before_is_not_timed_waiting() -> None:
    h = Harness(max_in_flight=1)  # pipelined, but served one at a time
    clock = timed(h)
    h.session.client_data(frame(produce_request(1)) + frame(produce_request(2)))
    assert sent(h.broker.frames()) == [1]
    clock.now += BROKER_S
    h.answer(produce_response(1))  # then the second is read and forwarded
    assert sent(h.broker.frames()) == [2]
    clock.now += BROKER_S
    h.answer(produce_response(2))
    assert answered(h.client.frames()) == [1, 2]
    count, total = latency(h)
    assert count == 2
    assert total == pytest.approx(2 * (BROKER_WRITE_S + CLIENT_WRITE_S))


async def test_a_request_read_after_a_throttle_is_timed_from_the_end_of_the_mute() -> None:
    h = Harness()
    clock = timed(h)
    h.throttle("producer_byte_rate", 60_000, client_id="app")
    h.send(produce_request(1))
    h.answer(produce_response(1))
    assert h.session.muted  # KIP-219: answered at once, then nothing is read for the throttle
    h.send(produce_request(2))
    assert sent(h.broker.frames()) == [1]
    clock.now += 60.0
    session = h.session
    assert session._unmute is not None
    session._unmute.cancel()
    h.gateway.now_ms = lambda: session._muted_until  # type: ignore[method-assign]
    session._end_mute()
    assert sent(h.broker.frames()) == [2]
    h.answer(produce_response(2))
    count, total = latency(h)
    assert count == 2
    assert total == pytest.approx(2 * (BROKER_WRITE_S + CLIENT_WRITE_S))


async def test_labels_are_kafkas_api_names() -> None:
    h = Harness()
    h.send(produce_request(1))
    h.answer(produce_response(1))
    families = [f for f in h.gateway.metrics.registry.collect()
                if f.name == "quota_streams_gateway_added_latency_seconds"]
    assert {s.labels["api"] for f in families for s in f.samples} == {"Produce"}
