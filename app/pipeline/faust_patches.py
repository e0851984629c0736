"""Every change this project makes to how Faust and aiokafka behave, each with why.

Installed once per app by `install` (the worker calls it before declaring its tables):

1. A 10 ms fetch wait, and 16 KiB a fetch waits for. Faust hard-codes
   `fetch_max_wait_ms=1500` for its consumer. aiokafka keeps one fetch in flight per broker,
   for the partitions with nothing buffered; a partition the agents just drained joins only
   the next fetch, which waits for the one in flight: with nothing else arriving, that is the
   broker holding it for the whole wait. Directives are sent when decided, so the wait adds to
   the event -> directive latency; an idle worker then polls 100 times a second, a small cost.
   With aiokafka's default of one byte, a busy worker fetched as often as the loop came round,
   one or two small gateway records a fetch, and each fetch's decoding and hand-over to the
   agents' thread cost more than the records in it; waiting for 16 KiB (or the 10 ms) makes a
   fetch carry more records as load rises, at the same latency (bench/bench_gateway_shape.py
   prints the worker's CPU and requests per record).

2. Committed offsets only from a coordinator that has the group loaded (`OffsetFetchGuard`).
   An OffsetFetch answer (v2 on) carries a group-level error code besides the per-partition
   ones. While a group's coordinator moves or reloads (a broker that paused and was fenced by
   its controller, a leader change of `__consumer_offsets`) Kafka answers NOT_COORDINATOR or
   COORDINATOR_LOAD_IN_PROGRESS there, with no partitions at all. aiokafka reads only the
   per-partition codes and so takes that answer for "no committed offset": Faust's seek to the
   committed offsets skips every partition, the fetcher resets them to `earliest`, and the
   worker re-reads input its group had committed. The guard raises the group-level error as
   aiokafka raises the same errors per partition (retried after the retry backoff;
   NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE look the coordinator up again). A consumer whose
   fetches of the committed offsets keep failing for COMMITTED_OFFSETS_WAIT_S gets
   `CommittedOffsetsUnavailable`, which stops the worker (exit != 0) for its orchestrator to
   restart, rather than letting it start anywhere but where its group left off.

3. A seek to the committed offsets that moves every input partition. Faust seeks back to the
   committed offsets when it had to discard records it fetched (a fetch that returned while its
   flow was stopped for a rebalance), but aiokafka's `seek_to_committed` skips a partition
   whose committed offset is None or 0: such a partition kept its position past the discarded
   records, which nothing read again before a restart. The patch sends those partitions to
   their beginning (where `auto_offset_reset=earliest` starts them). Changelog partitions are
   left where table recovery put them. Records dropped elsewhere are caught as offset gaps by
   `app.pipeline.continuity`.

4. A source record the ingest holds for its stream clock is not waited for (`untrack`). At a
   rebalance Faust waits until every record it handed the agents is acked; a held record
   waits for later records of its partition, which the rebalance has stopped fetching, so
   it would wait for good. Untracked, it is still neither acked nor committed (Faust commits
   acked offsets up to the first gap): the partition's next owner reads it again. Once its
   clock lets it go and the engine took samples of it here, it is waited for again (`track`):
   it is acked when the windows it changed are on the changelog, which a rebalance must wait
   for before those windows leave this worker.

5. Every Kafka request this process's clients send is counted by API
   (`quota_streams_kafka_requests_total`): what a source record costs in requests, which must
   fall as load rises (fetches and produce requests carrying more records each), is read off
   the metrics instead of guessed from a profile.

6. A commit never passes a record still in flight (`app.pipeline.continuity.commit_point`).
   Faust commits the consecutive acked offsets it finds first, and takes a single missing
   offset at their head for a compacted one: committed 14 and 15 acked, it commits 16 while
   14 waits for its windows' flush (faust-streaming issue 606; with no committed offset it
   checks nothing). The worker acks out of order (a record whose samples all left for other
   workers at once, one that changed windows here after the flush), so a SIGKILL after such a
   commit lost the windows of the record passed over, and its restart never read it again.
   Faust's gaps (offsets it saw jump, filled in as if acked) are not kept either: the input
   topics' offsets are consecutive, so a jump is records skipped, which continuity reads again.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

import faust
from aiokafka import errors
from aiokafka.conn import AIOKafkaConnection
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetFetchRequest
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from app.pipeline.continuity import commit_point
from app.pipeline.metrics import KAFKA_REQUESTS

FETCH_MAX_WAIT_MS = 10
#: A fetch returns once this much is there (or after the wait): under load a fetch carries
#: many small records instead of one or two, so fetches per record fall as load rises.
FETCH_MIN_BYTES = 16384
#: how long fetching the committed offsets may keep failing: past any coordinator reload or
#: election, and under the 90 s Faust waits for them at a rebalance (its recovery then stops for
#: good, leaving a worker up that processes nothing)
COMMITTED_OFFSETS_WAIT_S = 60.0

_create_worker_consumer = AIOKafkaConsumerThread._create_worker_consumer
_connection_send = AIOKafkaConnection.send
_send_req = GroupCoordinator._send_req
_do_fetch_commit_offsets = GroupCoordinator._do_fetch_commit_offsets
#: group-level errors after which the coordinator must be looked up again
_COORDINATOR_GONE = (errors.NotCoordinatorForGroupError, errors.GroupCoordinatorNotAvailableError)


async def _seek_to_committed(self: AIOKafkaConsumerThread) -> Any:
    """`AIOKafkaConsumerThread.seek_to_committed`, moving input partitions without a
    committed offset to their beginning too (item 3)."""
    consumer = self._ensure_consumer()
    changelogs = self.app.tables.changelog_topics

    async def seek() -> Any:
        offsets = await consumer.seek_to_committed()
        unset = [tp for tp, offset in offsets.items()
                 if not offset and tp.topic not in changelogs]
        if unset:
            await consumer.seek_to_beginning(*unset)
        return offsets

    return await self.call_thread(seek)


def _short_fetch_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
    consumer = _create_worker_consumer(self, *args, **kwargs)
    consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
    consumer._fetch_min_bytes = FETCH_MIN_BYTES
    return consumer


class CommittedOffsetsUnavailable(errors.KafkaError):
    """The group coordinator gave no committed offsets for as long as a worker waits for them."""

    retriable = False


class OffsetFetchGuard:
    """Patch 2: the group-level error of an OffsetFetch answer raised, and the retries bounded
    by `wait_s` of `clock` without an answer, counted per consumer (its coordinator)."""

    def __init__(self, wait_s: float = COMMITTED_OFFSETS_WAIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s
        self.clock = clock
        self._failing_since: WeakKeyDictionary[GroupCoordinator, float] = WeakKeyDictionary()

    async def send(self, coordinator: GroupCoordinator, request: Any) -> Any:
        """`GroupCoordinator._send_req`, raising an OffsetFetch answer's group-level error."""
        response = await _send_req(coordinator, request)
        code = getattr(response, "error_code", 0)
        if request.API_KEY == OffsetFetchRequest.API_KEY and code:
            error = errors.for_code(code)
            if error in _COORDINATOR_GONE:
                coordinator.coordinator_dead()
            raise error(coordinator.group_id)
        return response

    async def fetch(self, coordinator: GroupCoordinator, partitions: Any) -> Any:
        """`GroupCoordinator._do_fetch_commit_offsets`, failing for good once it has failed for
        `wait_s` without an answer in between."""
        try:
            offsets = await _do_fetch_commit_offsets(coordinator, partitions)
        except errors.KafkaError as exc:
            if exc.retriable:
                since = self._failing_since.setdefault(coordinator, self.clock())
                if self.clock() - since >= self.wait_s:
                    raise CommittedOffsetsUnavailable(
                        f"group {coordinator.group_id}: no committed offsets from its "
                        f"coordinator for {self.wait_s:.0f} s (last: {exc}); stopping rather "
                        "than starting anywhere else") from exc
            raise
        self._failing_since.pop(coordinator, None)
        return offsets

    def install(self) -> None:
        """Process-wide, in place of any guard installed before."""
        guard = self

        async def send(coordinator: GroupCoordinator, request: Any) -> Any:
            return await guard.send(coordinator, request)

        async def fetch(coordinator: GroupCoordinator, partitions: Any) -> Any:
            return await guard.fetch(coordinator, partitions)

        GroupCoordinator._send_req = send  # type: ignore[method-assign]
        GroupCoordinator._do_fetch_commit_offsets = fetch  # type: ignore[method-assign]


def untrack(app: faust.App, event: faust.EventT) -> None:
    """Patch 4: Faust no longer waits for this record's ack at a rebalance."""
    app.consumer._unacked_messages.discard(event.message)  # type: ignore[attr-defined]


def track(app: faust.App, event: faust.EventT) -> None:
    """Patch 4, undone: Faust waits for this record's ack at a rebalance (again)."""
    if not event.message.acked:
        app.consumer._unacked_messages.add(event.message)  # type: ignore[attr-defined]


def _new_offset(self: Consumer, tp: Any) -> int | None:
    """`Consumer._new_offset` (patch 6): the offset to commit for `tp`, never past a record
    delivered and not acked yet; the acked offsets below it are let go."""
    acked = self._acked[tp]
    if not acked:
        return None
    acked.sort()
    committed = self._committed_offset[tp]
    floor = committed or 0
    pending = min((message.offset for message in list(self._unacked_messages)
                   if message.tp == tp and not message.acked and message.offset >= floor),
                  default=None)
    point = commit_point(acked, committed, pending)
    if point is None:
        return None
    done = bisect_left(acked, point)
    self._acked_index[tp].difference_update(acked[:done])
    del acked[:done]
    return point


async def _no_gap(self: Consumer, tp: Any, offset_from: int, offset_to: int) -> None:
    """`Consumer._add_gap` (patch 6): a jump in offsets is records skipped, never acked."""


def api_name(request: Any) -> str:
    """`FetchRequest_v4` -> `Fetch`: a request's API, as a bounded label."""
    return type(request).__name__.split("Request", 1)[0] or "other"


def counted_send(self: AIOKafkaConnection, request: Any, expect_response: bool = True) -> Any:
    """Patch 5: `AIOKafkaConnection.send`, counted (thread-safe: the consumer has a thread)."""
    KAFKA_REQUESTS.labels(api_name(request)).inc()
    return _connection_send(self, request, expect_response=expect_response)


def install(app: faust.App) -> None:
    """The patches; safe to call again (they are process-wide)."""
    AIOKafkaConnection.send = counted_send  # type: ignore[method-assign]
    AIOKafkaConsumerThread._create_worker_consumer = _short_fetch_wait  # type: ignore[method-assign]
    AIOKafkaConsumerThread.seek_to_committed = _seek_to_committed  # type: ignore[method-assign]
    Consumer._new_offset = _new_offset  # type: ignore[method-assign]
    Consumer._add_gap = _no_gap  # type: ignore[method-assign]
    OffsetFetchGuard().install()
