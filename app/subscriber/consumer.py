"""`DirectiveSubscriber`: keeps an `ActiveSet` current from the control topic; a broker embeds it.

Why no consumer group: every broker needs *every* directive (a cluster-scope directive applies on
all brokers), so each subscriber reads all partitions itself with `assign()` and commits nothing;
at start it rebuilds the set by reading the topic from the beginning (or from a time bound).

The subscriber is ready once a poll returns no records and, for every partition, a Fetch
response has reported a high watermark that the position has reached: the end as of a fetch, not
of a ListOffsets asked before it.

Why the reader is `Supervised` (`app.kafka.supervision`): a reader that stopped would leave its owner
obeying the directives it had, and none after, without a sign. Fetch errors are retried in the
loop; anything else that ends it is a crash, which the owner's `Supervision` decides on (by
default: restart after a backoff, counted in `stats["crashes"]`, `healthy` False meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from app.contract.directives import MAX_RECORD_BYTES, BadDirective
from app.kafka.clients import TopicMissing, partitions_of
from app.kafka.offsets import read_to_highwater
from app.kafka.security import PLAINTEXT, KafkaSecurity
from app.kafka.supervision import Supervised, Supervision
from app.signing import Signing
from app.subscriber.allocations import Allocations
from app.subscriber.active_set import (
    ActiveSet,
    ConnectionDecision,
    MutationDecision,
    Throttle,
)

__all__ = ["DirectiveSubscriber", "SubscriberError", "wall_clock_ms"]

logger = logging.getLogger(__name__)


class SubscriberError(RuntimeError):
    """The subscriber cannot start (e.g. the control topic does not exist)."""


def wall_clock_ms() -> int:
    """Epoch milliseconds, the time base of directives."""
    return time.time_ns() // 1_000_000


class DirectiveSubscriber:
    """Reads `quota.directives` into an `ActiveSet`; sync queries are safe from any thread.

    Usage::

        sub = DirectiveSubscriber("kafka:9092", broker_id=1, signing=Signing.parse(keys),
                                  security=KafkaSecurity("SSL", ca_file="ca.pem"))
        await sub.start()
        await sub.wait_ready(timeout=30)
        throttle_ms, mute, why = sub.request_throttle("alice", "billing-app")

    `broker_id=None` keeps every broker's directives, for a proxy in front of several brokers
    (the gateway); its queries then name the broker with `broker=`.

    `signing` holds the keys a directive must be sealed with (`Signing()`: none, nothing
    checked) and `security` how to connect (plaintext unless given): the embedding process
    builds both from its settings (`app.settings.Settings.signing`, `.kafka_security`).

    `lookback_ms` starts from the first record newer than `now - lookback_ms` instead of the
    beginning; it must be at least the longest directive lifetime (`until - ts`) or a still
    active directive may be missed. Before `ready`, queries answer from a partial set.
    `max_records` bounds one poll, so applying a backlog never blocks the event loop for long.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        broker_id: int | None,
        *,
        topic: str = "quota.directives",
        lookback_ms: int | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        poll_timeout_ms: int = 200,
        max_records: int = 1000,
        expire_interval_ms: int = 1000,
        start_timeout: float = 30.0,
        consumer_options: Mapping[str, Any] | None = None,
        signing: Signing,
        security: KafkaSecurity = PLAINTEXT,
        supervision: Supervision | None = None,
    ) -> None:
        self.topic = topic
        self.broker_id = broker_id
        self._bootstrap = bootstrap_servers
        self._lookback_ms = lookback_ms
        self._clock = clock
        self._poll_timeout_ms = poll_timeout_ms
        self._max_records = max_records
        self._expire_interval_ms = expire_interval_ms
        self._start_timeout = start_timeout
        self._consumer_options = dict(consumer_options or {})
        #: directives no key of QS_SIGNING_KEYS sealed are refused (`app.signing`)
        self._signing = signing
        self._security = security
        self._active = ActiveSet(broker_id)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._bad: Counter[str] = Counter()
        self._consumer: AIOKafkaConsumer | None = None
        self._partitions: list[TopicPartition] = []
        self._reader = Supervised(f"directive subscriber ({topic})", self._run, supervision)
        self._started = False
        self._last_expire = 0
        self.ready = asyncio.Event()
        self._ready_threadsafe = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, assign every partition, seek and start the background reader; returns before
        the rebuild is done (await `wait_ready()` or `ready.wait()`)."""
        if self._started:
            return
        options: dict[str, Any] = {"fetch_max_wait_ms": 100, **self._security.aiokafka(),
                                   **self._consumer_options}
        options.update(group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
        consumer = AIOKafkaConsumer(bootstrap_servers=self._bootstrap, **options)
        try:
            async with asyncio.timeout(self._start_timeout):
                await consumer.start()
                self._partitions = await self._discover_partitions(consumer)
                consumer.assign(self._partitions)
                await self._seek_start(consumer)
        except BaseException as exc:
            await consumer.stop()
            if isinstance(exc, TimeoutError):
                raise SubscriberError(
                    f"Could not start the directive subscriber on {self._bootstrap} "
                    f"within {self._start_timeout} s"
                ) from None
            raise
        self.follow(consumer, self._partitions)

    def follow(self, consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
        """Read `consumer` (assigned `partitions`, positioned where to start) from now on."""
        self._consumer, self._partitions = consumer, partitions
        self._started = True
        self._reader.start()

    @property
    def healthy(self) -> bool:
        """Following the topic: False from a crash of the reader until its restart."""
        return self._reader.healthy

    async def stop(self) -> None:
        """Stop the reader and the consumer; the active set keeps its last state. Idempotent."""
        await self._reader.stop()
        self._started = False
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the active set has been rebuilt to the end of every partition."""
        async with asyncio.timeout(timeout):
            await self.ready.wait()

    @property
    def is_ready(self) -> bool:
        """Thread-safe readiness flag (`ready` is an asyncio.Event for the event loop)."""
        return self._ready_threadsafe.is_set()

    def wait_ready_sync(self, timeout: float | None = None) -> bool:
        """For broker threads outside the event loop; returns False on timeout."""
        return self._ready_threadsafe.wait(timeout)

    async def _discover_partitions(self, consumer: AIOKafkaConsumer) -> list[TopicPartition]:
        """List the topic's partitions without asking for the topic by name (a cluster may
        auto-create it); wait for it to exist within the start timeout."""
        while True:
            with contextlib.suppress(TopicMissing):
                return await partitions_of(consumer, self.topic)
            logger.info("Waiting for control topic %r to exist", self.topic)
            await asyncio.sleep(0.5)

    async def _seek_start(self, consumer: AIOKafkaConsumer) -> None:
        """From the beginning, or from the first record newer than now - lookback_ms. A partition
        without such a record (or a broker that cannot answer) is read from the beginning: slower,
        never wrong."""
        if self._lookback_ms is None:
            await consumer.seek_to_beginning(*self._partitions)
            return
        since = self._clock() - self._lookback_ms
        try:
            found = await consumer.offsets_for_times({tp: since for tp in self._partitions})
        except (KafkaError, ValueError) as exc:
            logger.warning("offsets_for_times failed (%s); reading from the beginning", exc)
            found = {}
        for tp in self._partitions:
            hit = found.get(tp)
            if hit is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, hit.offset)

    # ------------------------------------------------------------------ reader

    async def _run(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        backoff = 0.1
        while True:
            try:
                batches = await consumer.getmany(
                    timeout_ms=self._poll_timeout_ms, max_records=self._max_records
                )
                if not self.ready.is_set() and not batches \
                        and await read_to_highwater(consumer, self._partitions):
                    self._set_ready()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep following the topic whatever the client throws
                with self._lock:
                    self._counts["consumer_errors"] += 1
                logger.warning("Directive subscriber fetch failed: %r; retrying", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.1
            now = self._clock()
            for records in batches.values():
                for record in records:
                    self._handle(record, now)
            if now - self._last_expire >= self._expire_interval_ms:
                await self._expire(now)
                self._last_expire = now

    async def _expire(self, now: int, chunk: int = 2000) -> None:
        """Expire in chunks, releasing the lock (and the loop) between them, so a mass expiry
        never stalls broker threads waiting on a query."""
        while True:
            with self._lock:
                removed = self._active.expire(now, limit=chunk)
                self._counts["expired"] += removed
            if removed < chunk:
                return
            await asyncio.sleep(0)

    def _set_ready(self) -> None:
        with self._lock:
            size, records, bad = len(self._active), self._counts["records"], sum(self._bad.values())
        logger.info(
            "Directive subscriber ready: %d active directives from %d records (%d bad)",
            size, records, bad,
        )
        self._ready_threadsafe.set()
        self.ready.set()

    def _handle(self, record: ConsumerRecord, now: int) -> None:
        """Decode and apply one record; anything wrong with it is counted, never raised: one
        record must never stop the reader (it would stop following every later directive)."""
        try:
            self._apply(record, now)
        except Exception as exc:  # a validation gap must cost one record, not the reader
            logger.exception("Unexpected error applying a directive")
            with self._lock:
                self._count_bad("internal_error", record, repr(exc))

    def _apply(self, record: ConsumerRecord, now: int) -> None:
        directive: Any = None
        reason = ""
        if record.value is not None and len(record.value) > MAX_RECORD_BYTES:
            reason = "too_large"
        elif record.value is not None:
            payload, refused = self._signing.open(record.topic, record.key, record.value)
            if payload is None:
                reason = refused or "unsigned"
            else:
                try:
                    directive = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    reason = "not_json"
        with self._lock:
            self._counts["records"] += 1
            if record.value is None:
                self._counts["tombstones"] += 1
                return
            if reason:
                self._count_bad(reason, record)
                return
            try:
                outcome = self._active.apply(directive, now)
            except BadDirective as exc:
                self._count_bad(exc.reason, record, str(exc))
                return
            self._counts[outcome] += 1

    def _count_bad(self, reason: str, record: ConsumerRecord, detail: str = "") -> None:
        if not self._bad[reason]:
            logger.warning(
                "Skipping bad directive at %s-%d@%d (%s); further ones are only counted",
                record.topic, record.partition, record.offset, detail or reason,
            )
        self._bad[reason] += 1

    # ------------------------------------------------------------------ queries (any thread)

    def request_throttle(
        self,
        user: str,
        client_id: str,
        now: int | None = None,
        quotas: Collection[str] | None = None,
        broker: int | None = None,
    ) -> Throttle:
        """See `ActiveSet.request_throttle`; `now` defaults to the wall clock."""
        when = self._clock() if now is None else now
        with self._lock:
            return self._active.request_throttle(user, client_id, when, quotas, broker)

    def mutation(
        self, user: str, client_id: str, now: int | None = None, strict: bool = True,
        broker: int | None = None,
    ) -> MutationDecision:
        """See `ActiveSet.mutation`."""
        when = self._clock() if now is None else now
        with self._lock:
            return self._active.mutation(user, client_id, when, strict, broker)

    def connection(
        self, ip: str, listener: str, now: int | None = None, protected_listener: bool = False,
        broker: int | None = None,
    ) -> ConnectionDecision:
        """See `ActiveSet.connection`."""
        when = self._clock() if now is None else now
        with self._lock:
            return self._active.connection(ip, listener, when, protected_listener, broker)

    def __len__(self) -> int:
        with self._lock:
            return len(self._active)

    @property
    def allocations(self) -> Allocations:
        """The allocations read so far (cluster scope): `AllocatedLimits` reads them."""
        return self._active.allocations

    @property
    def stats(self) -> dict[str, Any]:
        """Counters for metrics: records, added/replaced/lifted/stale/ignored, bad by reason,
        crashes of the reader."""
        with self._lock:
            counts: dict[str, Any] = dict(self._counts)
            counts["active"] = len(self._active)
            counts["bad"] = sum(self._bad.values())
            counts["bad_reasons"] = dict(self._bad)
        counts["ready"] = self.is_ready
        counts["crashes"] = self._reader.crashes
        return counts
