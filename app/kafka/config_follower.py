"""Every worker's copy of the compacted config topic, on the event timeline.

Each worker (and gateway) reads all partitions of the config topic without a consumer group, so
every one holds every config; `ready` is set once it has read to the end. Each record
goes into the engine's `ConfigTimeline` with its Kafka timestamp (its arrival), so an event is
judged by the configs in force for it (`app.engine.timeline`), whenever the worker read them.

`confirmed_ms` is the watermark: a wall time (epoch ms) by which every config record appended
is known, from the latest fetch that found every partition read to its end. The agents hold an
event until the watermark passes its arrival plus the grace (`wait_confirmed`). A config read
after an event it applies to was released is counted as missed (`released_ms` is how far the
agents released): the grace did not cover its write delay, and the audit will differ.

Its reading loop runs `Supervised` (`app.kafka.supervision`): a follower that stopped would leave its
owner judging by stale configs, and holding events until `QS_CONFIG_HOLD_MAX_MS` each. The
owner says what a crash does: a worker exits (its orchestrator restarts it and the new process
reads the topic afresh), a gateway restarts the loop with a backoff and reports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from typing import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from app.engine.timeline import ConfigTimeline
from app.intake.newest_configs import STALE, NewestConfigs
from app.intake.records import decode_config
from app.kafka.clients import partitions_of
from app.kafka.offsets import end_offsets, read_to_highwater
from app.kafka.security import PLAINTEXT, KafkaSecurity
from app.kafka.supervision import Supervised, Supervision
from app.signing import REFUSALS, Signing

log = logging.getLogger(__name__)

#: How long a fetch of the config topic may wait for new records by default: how often, when
#: nothing is written, the watermark advances (the workers' is QS_CONFIG_POLL_MS, as it adds
#: to how long an event is held): README, QS_CONFIG_POLL_MS.
POLL_MS = 10
#: The labels refused records are counted by (a bounded set, for metrics); any other reason
#: is `invalid` (not JSON, not a valid quota_config).
REFUSED_LABELS = (*REFUSALS, STALE, "internal_error", "invalid")


def refused_label(reason: str) -> str:
    """The label a refusal is counted by."""
    head = reason.split(":", 1)[0]
    return head if head in REFUSED_LABELS else "invalid"


class ConfigFollower:
    """Tails the config topic into a `ConfigTimeline`; bad records are counted and skipped, as
    are configs older than the newest of their key (`app.intake.newest_configs`)."""

    def __init__(self, bootstrap: str, topic: str, timeline: ConfigTimeline,
                 on_bad: Callable[[str, bytes], None] | None = None, *,
                 signing: Signing, security: KafkaSecurity = PLAINTEXT, poll_ms: int = POLL_MS,
                 supervision: Supervision | None = None) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.poll_ms = poll_ms
        self.topic = topic
        self.timeline = timeline
        #: records no key of QS_SIGNING_KEYS sealed are bad (`app.signing`)
        self.signing = signing
        self.on_bad = on_bad
        self.newest = NewestConfigs()
        self.ready = asyncio.Event()
        self.applied = 0
        self.bad = 0
        #: refused records by `refused_label`
        self.refused: Counter[str] = Counter()
        self.late = 0
        self.missed = 0
        self.confirmed_ms = 0
        #: the latest arrival and event time (ms) of events the agents judged (`released`)
        self.released_ms = -1
        self.released_ts = -1
        self._advanced = asyncio.Event()
        self._reader = Supervised(f"config follower ({topic})", self._run, supervision)
        self._consumer: AIOKafkaConsumer | None = None
        self._tps: list[TopicPartition] = []
        #: the end of each partition not read that far yet (at start: `ready`)
        self._pending: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                    group_id=None, auto_offset_reset="earliest",
                                    fetch_max_wait_ms=self.poll_ms, **self.security.aiokafka())
        await consumer.start()
        self._consumer = consumer
        tps = await partitions_of(consumer, self.topic)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await end_offsets(self.bootstrap, tps, security=self.security)
        self.follow(consumer, tps, ends)

    def follow(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition],
               ends: dict[TopicPartition, int]) -> None:
        """Read `consumer` (assigned `tps`, at their beginning) from now on; `ready` once every
        partition was read to its end in `ends`."""
        self._consumer, self._tps = consumer, tps
        self._pending = {tp: end for tp, end in ends.items() if end > 0}
        if not self._pending:
            self.ready.set()
        self._reader.start()

    @property
    def healthy(self) -> bool:
        """Following the topic: False from a crash of the reading loop until its restart."""
        return self._reader.healthy

    @property
    def crashes(self) -> int:
        return self._reader.crashes

    async def _run(self) -> None:
        consumer, tps, pending = self._consumer, self._tps, self._pending
        assert consumer is not None
        while True:
            batches = await consumer.getmany(timeout_ms=self.poll_ms)
            for records in batches.values():
                for record in records:
                    self.apply(record.value or b"", record.timestamp, record.key)
            if not self.ready.is_set():
                for tp in list(pending):
                    if await consumer.position(tp) >= pending[tp]:
                        del pending[tp]
                if not pending:
                    log.info("configs loaded: %d records applied, %d bad, %d late", self.applied,
                             self.bad, self.late)
                    self.ready.set()
            await self._confirm(consumer, tps)

    async def _confirm(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        """Advance the watermark when every partition is read to the end its last fetch saw.

        A fetch's high watermark is from some time before its response was processed (aiokafka's
        timestamp): taking the fetch wait off that time keeps the watermark on the safe side.
        """
        if not tps:
            self._advance(int(time.time() * 1000))
            return
        if not await read_to_highwater(consumer, tps):
            return
        polled = [t for tp in tps if (t := consumer.last_poll_timestamp(tp)) is not None]
        if len(polled) == len(tps):
            self._advance(min(polled) - self.poll_ms)

    def _advance(self, confirmed: int) -> None:
        if confirmed > self.confirmed_ms:
            self.confirmed_ms = confirmed
            self._advanced.set()
            self._advanced = asyncio.Event()

    async def wait_confirmed(self, wall_ms: int, max_wait_s: float) -> bool:
        """Until every config appended before `wall_ms` is known; False if `max_wait_s` passed
        first."""
        deadline = time.monotonic() + max_wait_s
        while self.confirmed_ms < wall_ms:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), left)
        return True

    def released(self, arrival_ms: int, ts: int) -> None:
        """The agents judged events up to this arrival and event time (to count missed configs)."""
        if arrival_ms > self.released_ms:
            self.released_ms = arrival_ms
        if ts > self.released_ts:
            self.released_ts = ts

    def apply(self, value: bytes, arrival: int | None = None, key: bytes | None = None) -> None:
        """One config record; `arrival` is its Kafka timestamp (None: not from Kafka), `key` its
        Kafka key (the seal covers it). Whatever is wrong with it is counted, never raised: one
        record must not stop the follower."""
        try:
            self._apply(value, arrival, key)
        except Exception as exc:  # a validation gap must cost one record, not the follower
            log.exception("unexpected error applying a config record")
            self._bad(f"internal_error: {exc!r}", value)

    def _apply(self, value: bytes, arrival: int | None, key: bytes | None) -> None:
        payload, reason = self.signing.open(self.topic, key, value)
        update, reason = (None, reason) if payload is None else decode_config(payload)
        if update is None:
            self._bad(reason or "not a quota_config record", value)
            return
        stale = self.newest.offer(update)
        if stale is not None:
            self._bad(stale, value)
            return
        if self.timeline.add(update, arrival):
            self.late += 1
            log.warning("late config (ts %d, in Kafka at %s): in force from its arrival",
                        update.ts, arrival)
        if arrival is not None and arrival - self.timeline.grace_ms // 2 <= self.released_ms \
                and update.ts <= self.released_ts:
            self.missed += 1
            log.warning("config (ts %d, in Kafka at %d) read after events it applies to were "
                        "judged: its write took longer than the grace allows (QS_CONFIG_GRACE_MS)",
                        update.ts, arrival)
        self.applied += 1

    def _bad(self, reason: str, value: bytes) -> None:
        self.bad += 1
        self.refused[refused_label(reason)] += 1
        log.warning("bad config record: %s", reason)
        if self.on_bad is not None:
            self.on_bad(reason, value)

    async def stop(self) -> None:
        await self._reader.stop()
        if self._consumer is not None:
            await self._consumer.stop()
