"""A producer offering `rate` bytes/s of `record_bytes` records, in each client library.

At most `window` bytes are unacknowledged at a time (the library's own buffer is kept about that
size), so a producer held back by a broker waits instead of queueing without end, and time spent
waiting is not made up afterwards: it offers a load, it does not replay a backlog. Counted each
second: `bytes` and `records` acknowledged, `errors`.

confluent-kafka (librdkafka) and aiokafka ignore `throttle_time_ms`; kafka-python honours it
(gateway notes): only the connection being muted holds the first two back. `java` is
kafka-clients, run as its own program (`app.clients.java`), and `kafkajs` KafkaJS
(`app.clients.node`). A broker refusing the client's
authentication is `AuthenticationFailed` in every library (`app.clients.security`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from app.clients.report import Pace, Reporter
from app.clients.security import AuthenticationFailed, aiokafka_refusals, kafka_python_refusals
from app.kafka.security import KafkaSecurity

T = TypeVar("T")

#: The client libraries of the produce and consume programs that `make setup` installs.
LIBRARIES = ("confluent-kafka", "kafka-python", "aiokafka", "java")
#: ... and KafkaJS, installed on first use (app/clients/node.py).
PROGRAM_LIBRARIES = (*LIBRARIES, "kafkajs")


def produce(library: str, bootstrap: str, topic: str, client_id: str, rate: float,
            record_bytes: int, seconds: float, window: int, reporter: Reporter,
            security: KafkaSecurity, request_timeout_ms: int | None = None) -> None:
    """`request_timeout_ms`: confluent-kafka's socket.timeout.ms (None: the library's)."""
    if library == "confluent-kafka":
        _confluent(bootstrap, topic, client_id, rate, record_bytes, seconds, window, reporter,
                   security, request_timeout_ms)
    elif library == "kafka-python":
        _kafka_python(bootstrap, topic, client_id, rate, record_bytes, seconds, window, reporter,
                      security)
    elif library == "aiokafka":
        asyncio.run(_aiokafka(bootstrap, topic, client_id, rate, record_bytes, seconds, window,
                              reporter, security))
    else:
        raise ValueError(f"unknown library {library!r}")


class _Window:
    """Unacknowledged bytes, updated from the library's callback thread."""

    def __init__(self, reporter: Reporter) -> None:
        self.outstanding = 0
        self.lock = threading.Lock()
        self.reporter = reporter

    def sent(self, n: int) -> None:
        with self.lock:
            self.outstanding += n

    def done(self, n: int, ok: bool) -> None:
        with self.lock:
            self.outstanding -= n
            if ok:
                self.reporter.add("bytes", n)
                self.reporter.add("records")
            else:
                self.reporter.add("errors")


def confluent_refusals(refused: list[str]) -> dict[str, object]:
    """librdkafka's `error_cb`, keeping the reports of a refused authentication in `refused`."""
    from confluent_kafka import KafkaError

    def on_error(error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            refused.append(error.str())

    return {"error_cb": on_error}


def _confluent(bootstrap: str, topic: str, client_id: str, rate: float, size: int,
               seconds: float, window: int, reporter: Reporter, security: KafkaSecurity,
               request_timeout_ms: int | None) -> None:
    from confluent_kafka import KafkaException, Producer

    refused: list[str] = []
    timeout = {} if request_timeout_ms is None else {"socket.timeout.ms": request_timeout_ms}
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "queue.buffering.max.kbytes": max(64, window // 1024), **timeout,
                         **security.confluent(), **confluent_refusals(refused)})
    state = _Window(reporter)
    value = b"x" * size
    pace = Pace(rate, max(size, rate / 20))
    deadline = time.monotonic() + seconds

    def delivered(err: object, msg: object) -> None:
        state.done(size, err is None)

    while time.monotonic() < deadline:
        if refused:
            raise AuthenticationFailed(refused[0])
        wait = pace.take(size) if state.outstanding + size <= window else 0.01
        if wait:
            producer.poll(min(wait, 0.05))
            reporter.tick()
            continue
        try:
            producer.produce(topic, value, on_delivery=delivered)
            state.sent(size)
        except (BufferError, KafkaException):
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(5)


def _kafka_python(bootstrap: str, topic: str, client_id: str, rate: float, size: int,
                  seconds: float, window: int, reporter: Reporter, security: KafkaSecurity) -> None:
    from kafka import KafkaProducer

    producer = kafka_python_start(lambda timeout_ms: KafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5, max_block_ms=2000,
        bootstrap_timeout_ms=timeout_ms, **security.kafka_python()))
    state = _Window(reporter)
    value = b"x" * size
    pace = Pace(rate, max(size, rate / 20))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        wait = pace.take(size) if state.outstanding + size <= window else 0.005
        if wait:
            time.sleep(min(wait, 0.05))
            reporter.tick()
            continue
        try:
            future = producer.send(topic, value)
        except Exception:  # kafka-python raises KafkaTimeoutError and friends when blocked
            reporter.add("errors")
            continue
        state.sent(size)
        future.add_callback(lambda _md: state.done(size, True))
        future.add_errback(lambda _exc: state.done(size, False))
    try:  # the run is measured; what is still queued may wait out a throttle longer than this
        producer.flush(5)
        producer.close(5)
    except Exception:  # kafka-python's KafkaTimeoutError
        reporter.add("errors")


def kafka_python_start(make: Callable[[int], T], seconds: float = 30.0) -> T:
    """A kafka-python client, `make(bootstrap_timeout_ms)`, bootstrapped within `seconds`; a
    refused authentication is `AuthenticationFailed`. kafka-python retries a refusal until its
    bootstrap times out, so it is asked for short bootstraps, again until one succeeds, its log
    shows a refusal, or `seconds` have passed."""
    from kafka.errors import KafkaTimeoutError

    deadline = time.monotonic() + seconds
    with kafka_python_refusals() as refusals:
        while True:
            try:
                return make(3000)
            except KafkaTimeoutError as exc:
                refusals.check(exc)
                if time.monotonic() > deadline:
                    raise


async def aiokafka_start(client: Any) -> None:
    """Start an aiokafka client; a refused authentication is `AuthenticationFailed`."""
    from aiokafka.errors import KafkaConnectionError

    with aiokafka_refusals() as refusals:
        try:
            await client.start()
        except KafkaConnectionError as exc:
            await client.stop()
            refusals.check(exc)
            raise


async def _aiokafka(bootstrap: str, topic: str, client_id: str, rate: float, size: int,
                    seconds: float, window: int, reporter: Reporter, security: KafkaSecurity) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5,
                                **security.aiokafka())
    await aiokafka_start(producer)
    state = _Window(reporter)
    value = b"x" * size
    pace = Pace(rate, max(size, rate / 20))
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            wait = pace.take(size) if state.outstanding + size <= window else 0.005
            if wait:
                await asyncio.sleep(min(wait, 0.05))
                reporter.tick()
                continue
            future = await producer.send(topic, value)
            state.sent(size)
            future.add_done_callback(
                lambda f: state.done(size, not f.cancelled() and f.exception() is None))
        await producer.flush()
    finally:
        await producer.stop()
