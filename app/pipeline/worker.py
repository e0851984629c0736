"""One worker, built from settings: brokers' events in, throttle directives out.

Topology (quota logic is in `app.engine`, decoding and routing in `app.intake`; this module
only moves bytes and state between Kafka, them and the table):

    quota.events.{request,connection,mutation}   (contract records: JSON or columnar)
        -> agent `ingest`: the intake decodes and validates each record, its partition's
           stream clock judges its timestamps (holding whole records, in order, until the
           partition's recent timestamps agree) and what is bad is dead-lettered; the samples
           are split by route key, for as many source records as arrive together:
           - those whose windows this worker holds go through the engine at once, over the
             `entity-windows` RocksDB table (one stage: no internal record);
           - the others leave as one internal record per samples partition
    <app_id>-samples                              (internal, partitioned by crc32(route key))
        -> agent `aggregate`: the same engine step for samples other workers routed here
    quota.directives                              (the control topic)

Directives are sent as soon as they are decided; idle windows expire. With one worker every
sample takes the one stage; with W workers about 1/W do (the rest cross Kafka once more).

Run it with `quota-streams worker` (or `faust -A app.pipeline.faust_app worker -l info`).
Everything a worker holds is on its `Worker` object: two workers in one process (tests) share
nothing but the process-wide Faust patches (`app.pipeline.faust_patches`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any, cast

import faust
import orjson
from faust.types import TP
from mode import CrashingSupervisor

from app.console import web as console_web
from app.console.index import ConsoleIndex, chart_reading
from app.console.service import Console, ConsoleAccess, config_writer
from app.engine.engine import QuotaEngine, Window
from app.intake.clock import StreamClock
from app.intake.deadletter import encode_deadletter
from app.intake.records import Decoded, decode_source
from app.intake.routes import Router
from app.intake.stream import StreamIntake
from app.kafka.clock_seed import ClockSeeder
from app.kafka.config_follower import ConfigFollower
from app.kafka.supervision import Supervision
from app.pipeline import codec, faust_patches, metrics
from app.pipeline.aggregate import apply_record
from app.pipeline.continuity import Continuity, Verdict
from app.pipeline.ingest import MAX_ROWS, Outbox
from app.pipeline.lag_meter import LagMeter
from app.pipeline.partitioner import MemoPartitioner
from app.pipeline.topology import samples_topic
from app.settings import Settings
from app.contract.keys import directive_key
from tables.entity_state import TABLE_NAME, PartitionCache
from tables.faust_store import PartitionStore, raw_table

log = logging.getLogger("quota_streams")

#: source records the ingest takes at once at most (each holds up to thousands of samples)
TAKE_MAX_RECORDS = 64
#: how long the group coordinator waits for a worker's heartbeat before it hands its partitions
#: to the others (heartbeats go every second)
SESSION_TIMEOUT_S = 6.0
#: how far past a hold's bound (`StreamIntake.due`) a quiet partition's clock is settled: the
#: clocks of the producers that stamp the source records may be that far behind this one's
QUIET_MARGIN_MS = 1000
#: records acked at once after a flush, between which the agents run: a flush acks every source
#: record taken since the last one (thousands a second from many small gateway records), and
#: acking them in one go would hold the loop for tens of ms (the event -> directive p99)
ACK_SLICE = 256
#: how long a seek back may wait for the consumer's thread before it is given up (and asked
#: again by `Continuity.due`, whose RESEEK_S it stays under)
SEEK_TIMEOUT_S = 4.0


def arrival_ms(event: faust.EventT) -> int:
    """A record's Kafka timestamp in ms: when its samples arrived (`app.engine.timeline`)."""
    return int(event.message.timestamp * 1000)


class Worker:
    """The Faust app of one worker, its agents, and the state they share."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.security = security = settings.kafka_security()
        self.signing = settings.signing()
        self.bootstrap = bootstrap = settings.kafka_bootstrap_servers or "127.0.0.1:9092"
        partitions = settings.partitions
        self.app = app = faust.App(
            settings.app_id,
            broker=[f"kafka://{host.strip()}" for host in bootstrap.split(",")],
            store="rocksdb://",
            datadir=settings.state_dir,
            topic_partitions=partitions,
            table_standby_replicas=settings.standby_replicas,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=SESSION_TIMEOUT_S,
            broker_heartbeat_interval=1.0,
            broker_rebalance_timeout=10.0,
            broker_commit_interval=1.0,
            producer_acks=-1,
            web_bind=settings.web_host,
            web_port=settings.web_port,
            # the URL the group's assignment announces: the console's pages ask the other
            # workers there (`app.console.service`)
            web_host=settings.advertised_web_host,
            # Faust's own pages would dump table rows (user names, usage) and the partition of
            # any key: the worker serves /metrics, /ready and the console only.
            web_tables_enabled=False,
            web_router_enabled=False,
            web_graph_enabled=False,
            web_stats_enabled=False,
            key_serializer="raw",
            value_serializer="raw",
            producer_partitioner=MemoPartitioner(),
            broker_credentials=security.faust(),
        )
        faust_patches.install(app)

        self.engine_settings = settings.engine()
        self.engine = QuotaEngine(self.engine_settings)
        self.router = Router(self.engine, partitions)
        self.source = app.topic(settings.topic_request, settings.topic_connection,
                                settings.topic_mutation)
        self.samples = app.topic(samples_topic(settings), partitions=partitions, internal=True)
        self.samples_name = self.samples.get_topic_name()
        self.directives_name = settings.topic_directives
        self.deadletter_topic = app.topic(settings.topic_deadletter)
        self.table = raw_table(app.Table(TABLE_NAME, partitions=partitions, key_type=bytes,
                                         value_type=bytes))
        # A crashed follower takes the worker down, like a crashed agent (`_wire`): while it
        # is down every event waits out QS_CONFIG_HOLD_MAX_MS and is then judged without the
        # configs it may need (a decision the audit will not reproduce); the restarted process
        # re-judges the uncommitted events with the whole config topic read.
        self.follower = ConfigFollower(bootstrap, settings.topic_configs,
                                       self.engine.timeline, signing=self.signing,
                                       security=security,
                                       poll_ms=settings.config_poll_ms,
                                       supervision=Supervision(give_up=app.crash))
        self.hold_max_s = settings.config_hold_max_ms / 1000.0
        self.metrics = metrics.WorkerMetrics()
        self.top_entities = metrics.TopEntities(self.metrics, settings.metrics_top_n)
        #: each window's latest check (filled by the engine step), for the console and the
        #: top entities' gauges
        self.windows = ConsoleIndex(settings.console_history_windows)
        self.caches: dict[int, PartitionCache] = {}
        #: per samples partition, the internal records applied since its last flush
        self.pending: dict[int, list[Any]] = defaultdict(list)
        #: source records whose samples went through the engine here (`apply_local`), acked
        #: once the windows they changed are on the changelog (`flush_all`)
        self.applied: list[Any] = []
        self.outbox = Outbox()  # the ingest's samples not yet sent to the samples topic
        self.state_lock = asyncio.Lock()
        #: the records of one take routed, or a quiet partition's settled, at a time (records
        #: leave their stream clocks, into the outbox, in order)
        self.intake_lock = asyncio.Lock()
        #: per source partition, its stream clock and the records it holds
        self.streams: dict[tuple[str, int], StreamIntake[faust.EventT]] = {}
        self.seeder = ClockSeeder(bootstrap, security=security)
        self.stats: Counter[str] = Counter()  # for the periodic progress line in the log
        self._metrics_seen: Counter[str] = Counter()  # follower counters already exported
        #: next offset to process per source/samples partition, and how long records waited
        #: to be (the lag gauges)
        self.processed: dict[TP, int] = {}
        self.lag_meter = LagMeter()
        self.continuity = Continuity()
        #: seeks back under way (`seek_back`), referenced until done
        self._seeks: set[asyncio.Future[None]] = set()
        self._wire()

    def _wire(self) -> None:
        """Declare the agents, tasks, pages and the revocation handler on the app.

        An agent that raises takes the worker down (exit code != 0) instead of being restarted
        in place: Faust's default restart left the crashed agent's partitions unprocessed,
        with /ready still saying ready and SIGTERM no longer stopping the worker. The
        orchestrator restarts the process, which resumes from the committed offsets.
        """
        app = self.app
        app.agent(self.source, name="ingest", supervisor_strategy=CrashingSupervisor)(self.ingest)
        app.agent(self.samples, name="aggregate",
                  supervisor_strategy=CrashingSupervisor)(self.aggregate)
        app.task(self.follower.start)
        app.task(self.flush_loop)
        app.on_partitions_revoked.connect(self.on_revoked)

        async def metrics_page(web: Any, request: Any) -> Any:
            return web.bytes(self.metrics.render(), content_type="text/plain; version=0.0.4")

        async def ready_page(web: Any, request: Any) -> Any:
            ready, owned = self.readiness()
            return web.json({"ready": ready, "partitions": owned}, status=200 if ready else 503)

        app.page("/metrics")(metrics_page)
        app.page("/ready")(ready_page)
        console_web.install(app, self.console())

    def console(self) -> Console:
        """The console over this worker's windows, asking the others the group's assignment
        names (Faust's table metadata) for theirs."""
        settings = self.settings
        app = self.app

        def peers() -> list[str]:
            try:
                hosts = app.router.table_metadata(TABLE_NAME)
            except Exception:  # no assignment yet
                return []
            return sorted(str(host).rstrip("/") for host in hosts)

        async def fetch(url: str, path: str, params: Mapping[str, str]) -> Any:
            async with app.http_client.get(url + path, params=dict(params)) as response:
                response.raise_for_status()
                return await response.json(loads=orjson.loads)

        write = config_writer(self.bootstrap, settings.topic_configs, self.signing,
                              self.security)
        return Console(self.windows, self.state_of, lambda: self.engine.configs,
                       self.engine_settings,
                       ConsoleAccess(settings.console_edit, settings.console_token),
                       str(app.conf.canonical_url).rstrip("/"), peers, fetch, write)

    def state_of(self, partition: int, key: str) -> Any:
        """A window's state (or a companion's: shares, debt) in the partition holding it."""
        cache = self.caches.get(partition)
        return None if cache is None else cache.get(key)

    # -- the ingest ----------------------------------------------------------------------------

    async def ingest(self, stream: faust.StreamT) -> None:
        """Decode and validate contract records; re-key their samples by route key.

        The records that arrive within QS_INGEST_LINGER_MS (at most TAKE_MAX_RECORDS) are
        taken together, held until the config topic is known past their arrival (`hold`), and
        their samples go out as one internal record per samples partition (sooner if MAX_ROWS
        wait). `noack_take`, not `take_events`: the latter acks its records when the body
        exits, even by an exception, before their samples were sent; `send_outbox` acks them
        once they were. A record its stream clock holds (`route`) reaches the outbox, and is
        acked, only with a later take or when its partition went quiet (`settle_quiet`).
        """
        await self.follower.ready.wait()
        linger = self.settings.ingest_linger_ms / 1000.0
        async for taken in stream.noack_take(TAKE_MAX_RECORDS, within=linger):
            events = [event for event in taken if await self.admit(event)]
            if not events:
                continue
            await self.hold(max(arrival_ms(event) for event in events), "ingest")
            async with self.intake_lock:
                for event in events:
                    await self.route(event)
                await self.send_outbox()

    async def hold(self, arrival: int, stage: str) -> None:
        """Wait until every config that reached Kafka by `arrival` plus the grace is known, so
        a sample is judged by the same configs whenever the worker happens to read them. The
        rule needs those up to half the grace after `arrival` (`app.engine.timeline`); the
        other half covers the clocks (config writers', brokers', this worker's). Costs about
        the grace plus one follower poll of latency."""
        need = arrival + self.engine_settings.config_grace_ms
        follower = self.follower
        if follower.confirmed_ms < need:
            self.metrics.config_held.labels(stage).inc()
            started = time.monotonic()
            if not await follower.wait_confirmed(need, self.hold_max_s):
                self.metrics.config_hold_expired.labels(stage).inc()
                log.warning("%s: config topic not confirmed within QS_CONFIG_HOLD_MAX_MS; "
                            "going on", stage)
            self.metrics.config_hold_seconds.labels(stage).observe(time.monotonic() - started)

    async def route(self, event: faust.EventT) -> None:
        """One source record through its partition's stream clock; what that lets go (the
        record itself, unless the clock holds it with those before it) to the outbox.

        A held record is not in the outbox, so not acked: its offset is not committed before
        its samples are sent, whenever its clock lets it go (`app.intake.stream`)."""
        message = event.message
        arrival = arrival_ms(event)
        self.processed[message.tp] = message.offset + 1
        self.lag_meter.taken(message.tp, arrival, time.time() * 1000.0)
        stream = self.streams.get((message.topic, message.partition))
        if stream is None:
            stream = self.streams[(message.topic, message.partition)] = StreamIntake(
                await self.seeded_clock(message))
        self.metrics.events.labels(message.topic).inc()
        released = stream.offer(decode_source(event.value, arrival), event)
        if not released or released[-1][1] is not event:
            faust_patches.untrack(self.app, event)
        for decoded, source in released:
            await self.emit(decoded, source, stream.clock.time)
        if self.outbox.size >= MAX_ROWS:
            await self.send_outbox()

    async def settle_quiet(self, now_ms: int) -> None:
        """Judge and send on the records held by the clocks of partitions that went quiet.

        Quiet: this worker took every record of the partition its last fetch saw, and its
        clock (`now_ms`) is QUIET_MARGIN_MS past the hold's bound (`StreamIntake.due`). A record
        appended later carries a Kafka timestamp past the bound too (unless its producer's
        clock is that far behind this one's), so a read-back, which settles the hold when that
        record arrives, gives the verdicts given here."""
        async with self.intake_lock:
            for key, stream in list(self.streams.items()):
                if (self.streams.get(key) is stream  # not revoked meanwhile
                        and stream.due(now_ms - QUIET_MARGIN_MS) and self.caught_up(TP(*key))):
                    for decoded, source in stream.finish():
                        await self.emit(decoded, source, stream.clock.time)
            if self.outbox.held:
                await self.send_outbox()

    def caught_up(self, tp: TP) -> bool:
        """Has this worker taken every record of `tp` up to its last fetch's high watermark?"""
        try:
            highwater = self.app.consumer.highwater(tp)
        except Exception:  # not fetched yet
            return False
        return highwater is not None and self.processed.get(tp, -1) >= highwater

    async def emit(self, decoded: Decoded, event: faust.EventT, time_ms: int) -> None:
        """A judged record's samples into the outbox, its bad ones to the dead-letter topic."""
        self.outbox.add(decoded, self.router)
        self.follower.released(decoded.arrival, time_ms)
        self.outbox.held.append(event)
        if decoded.dead:
            message = event.message
            where = f"{message.topic}/{message.partition}@{message.offset}"
            for _, reason, raw in decoded.dead:
                await self.send_deadletter(reason, raw, where, event.key)

    async def admit(self, event: faust.EventT) -> bool:
        """Whether to process `event`, by its offset (`app.pipeline.continuity`); a gap seeks
        its partition back to the first record skipped."""
        message = event.message
        tp = message.tp
        consumer = self.app.consumer
        # Faust's own record of the group's committed offset, read at assignment and kept at
        # each commit (None for none, or 0)
        committed = consumer._committed_offset.get(tp)  # type: ignore[attr-defined]
        if committed is None and self.continuity.expected(tp) is None:
            # none committed (Faust reads a committed 0 as none too): the partition is read
            # from its start (`faust_patches` item 3), so a first record past the start is a gap
            committed = await self.seeder.log_start(tp.topic, tp.partition)
        given_up = self.continuity.given_up
        verdict = self.continuity.judge(tp, message.offset, committed, time.monotonic())
        if verdict is Verdict.PROCESS:
            if self.continuity.given_up > given_up:
                log.error("%s: records before offset %d never arrived after repeated seeks "
                          "back; going on without them", tp, message.offset)
                self.metrics.offset_gaps.labels(tp.topic, "given_up").inc(
                    self.continuity.given_up - given_up)
            return True
        self.metrics.offset_gaps.labels(tp.topic, verdict.value).inc()
        # never acked (processed already, or delivered again after the seek): a commit must
        # not wait for it (`faust_patches` item 6)
        faust_patches.untrack(self.app, event)
        if verdict is Verdict.GAP:
            expected = self.continuity.expected(tp)
            assert expected is not None
            log.warning("%s: offset %d delivered while %d was expected (the consumer skipped "
                        "records): seeking back to %d", tp, message.offset, expected, expected)
            self.seek_back(tp, expected)
        return False

    def seek_back(self, tp: TP, offset: int) -> None:
        """Ask for `tp`'s consumer to move to `offset`, without waiting for it: the seek runs
        on the consumer's own thread (a seek from this loop does not wake its fetcher), which
        may be in a rebalance that waits for the agents; records delivered meanwhile are
        dropped as rewinding (`Continuity`)."""
        task = asyncio.ensure_future(self._seek(tp, offset))
        self._seeks.add(task)
        task.add_done_callback(self._seeks.discard)

    async def _seek(self, tp: TP, offset: int) -> None:
        """A seek that fails or hangs is asked again on the flush cadence (`Continuity.due`);
        one on a partition revoked meanwhile needs none (its next owner reads from the
        committed offset)."""
        try:
            await asyncio.wait_for(self.app.consumer.seek_wait({tp: offset}), SEEK_TIMEOUT_S)
        except Exception as exc:
            log.warning("%s: seek back to %d failed (%r); asked again unless the partition "
                        "was revoked", tp, offset, exc)

    async def seeded_clock(self, message: Any) -> StreamClock:
        """The clock a worker that had read the partition from its start would have here."""
        clock = StreamClock()
        found = await self.seeder.timestamps(message.topic, message.partition, message.offset)
        self.metrics.clock_seeds.labels("failed" if found is None else "seeded").inc()
        if found:
            clock.seed(found)
        return clock

    async def send_outbox(self) -> None:
        """The outbox's samples through the engine where this worker holds their windows, one
        internal record per samples partition for the others; then the source records are
        acked, or left to the next flush if the engine took some of their samples here."""
        requests, rows, held, counts = self.outbox.take()
        out: list[tuple[dict[str, Any], int]] = []
        local = 0
        async with self.state_lock:
            for partition in self.holding(requests.keys() | rows.keys()):
                batch = requests.pop(partition, None)
                part_rows = rows.pop(partition, [])
                if batch is not None:
                    out.extend(self.apply_local(partition, batch, []))
                    local += len(batch)
                if part_rows:
                    out.extend(self.apply_local(partition, None, part_rows))
                    local += len(part_rows)
        rekeyed = 0
        for partition, batch in requests.items():
            await self.produce(self.samples_name, codec.encode_requests(batch),
                               partition=partition)
            rekeyed += len(batch)
        for partition, part_rows in rows.items():
            await self.produce(self.samples_name, codec.encode_rows(part_rows),
                               partition=partition)
            rekeyed += len(part_rows)
        for t, n in counts.items():
            self.metrics.samples.labels(t).inc(n)
        self.metrics.samples_path.labels("one_stage").inc(local)
        self.metrics.samples_path.labels("rekeyed").inc(rekeyed)
        if local:
            for event in held:  # released by its stream clock untracked, maybe: Faust must
                faust_patches.track(self.app, event)  # wait for it at a rebalance again
            self.applied.extend(held)
        else:
            for event in held:
                event.ack()
        for directive, appended_ms in out:
            await self.publish(directive, appended_ms)

    def holding(self, partitions: Any) -> list[int]:
        """Those of `partitions` whose windows this worker holds now, recovered: their samples
        may skip the samples topic. During a rebalance or a recovery, none."""
        app = self.app
        if app.rebalancing or app.in_recovery or not partitions:
            return []
        name = self.samples_name
        owned = {tp.partition for tp in app.consumer.assignment() if tp.topic == name}
        return sorted(p for p in partitions if p in owned)

    async def send_deadletter(self, reason: str, raw: Any, source: str,
                              key: bytes | None = None) -> None:
        self.metrics.deadletter.labels(metrics.reason_label(reason)).inc()
        await self.deadletter_topic.send(key=key, value=encode_deadletter(reason, raw, source))

    async def produce(self, topic: str, value: bytes, key: bytes | None = None,
                      partition: int | None = None) -> None:
        """Hand a record to the Kafka client, skipping Faust's per-message topic machinery
        (futures, callbacks, sensors), which cost several times the client's own send. Faust
        still flushes this producer before every offset commit, so at-least-once holds as with
        `send`."""
        delivery = await self.app.producer.send(topic, key, value, partition, None, None)
        cast(asyncio.Future, delivery).add_done_callback(self._delivered)

    def _delivered(self, delivery: asyncio.Future) -> None:
        """A record the client gave up on stops the worker before its input is committed."""
        if not delivery.cancelled() and delivery.exception() is not None:
            log.error("send failed, stopping: %r", delivery.exception())
            asyncio.ensure_future(self.app.crash(cast(BaseException, delivery.exception())))

    # -- the aggregate -------------------------------------------------------------------------

    async def aggregate(self, stream: faust.StreamT) -> None:
        """Run the engine over each partition's windows; publish directives at once."""
        await self.follower.ready.wait()
        async for event in stream.noack().events():
            if not await self.admit(event):
                continue
            partition = event.message.partition
            self.processed[event.message.tp] = event.message.offset + 1
            self.lag_meter.taken(event.message.tp, arrival_ms(event), time.time() * 1000.0)
            batch, rows = codec.decode(event.value)
            arrival = codec.latest(batch, rows)[1]
            # known here already, unless another worker's ingest routed them
            await self.hold(arrival, "aggregate")
            async with self.state_lock:
                out = self.apply_local(partition, batch, rows)
                self.pending[partition].append(event)
            for directive, appended_ms in out:
                await self.publish(directive, appended_ms)

    def apply_local(self, partition: int, batch: Any, rows: list[list[Any]]
                    ) -> list[tuple[dict[str, Any], int]]:
        """Samples through the engine over one partition's windows (the caller holds the
        state lock); returns the directives to publish. Both stages' one engine step."""
        cache = self.caches.get(partition)
        if cache is None:
            cache = self.caches[partition] = self.partition_cache(partition)
        engine = self.engine
        engine.store = cache
        out = apply_record(engine, batch, rows, self.windows.checks(partition))
        self.stats["samples"] += len(rows) if batch is None else len(batch)
        self.stats["records"] += 1
        now = codec.latest(batch, rows)[0]
        if cache.sweeps.due(now):
            expired = engine.expire(now)
            self.windows.forget(partition, expired)
            self.stats["expired"] += len(expired)
            self.metrics.windows_expired.inc(len(expired))
        cache.mark(engine.drain_touched())
        return out

    def partition_cache(self, partition: int) -> PartitionCache:
        """A partition's windows, all of them read (an expiry sweep then sees every one)."""
        cache = PartitionCache(PartitionStore(self.table, partition),
                               self.engine_settings.sweep_every_ms)
        started = time.monotonic()
        loaded = cache.load_all()
        if loaded:
            log.info("partition %d: %d windows loaded in %.1f s", partition, loaded,
                     time.monotonic() - started)
        return cache

    async def publish(self, directive: dict[str, Any], appended_ms: int) -> None:
        self.stats["directives"] += 1
        key = directive_key(directive)
        self.windows.published_record(directive)
        name = self.directives_name
        await self.produce(name, self.signing.seal(name, key, orjson.dumps(directive)), key=key)
        if directive.get("kind") == "allocation":  # cluster scope: no throttle of its own
            self.metrics.directives.labels(directive["quota"], "allocation").inc()
        else:
            self.metrics.directives.labels(directive["quota"], directive["action"]).inc()
            self.metrics.throttle_ms.observe(directive["throttle_time_ms"])
        self.metrics.latency.observe(max(0.0, time.time() - appended_ms / 1000.0))

    # -- flushing, revocation, health ------------------------------------------------------------

    async def flush_all(self) -> None:
        """Write each partition's dirty windows once, then ack the records that changed them.

        One partition at a time under the state lock, yielding between them, and the wait for
        the changelog's delivery outside it: the agents keep running meanwhile instead of
        stalling for the whole flush (a latency spike once per flush interval).
        """
        delivered: list[Any] = []
        # Every partition a record taken here changed is flushed in this round: those records
        # were applied before it began, so the partitions they changed are dirty now.
        written, self.applied = self.applied, []
        dirty = {p for p, cache in self.caches.items() if cache.dirty or cache.deleted}
        for partition in sorted(dirty | self.pending.keys()):
            async with self.state_lock:
                events = self.pending.get(partition)
                cache = self.caches.get(partition)
                if cache is not None and (cache.dirty or cache.deleted):
                    changes = cache.flush()
                    self.stats["windows_written"] += len(changes)
                    delivered.append(await cache.store.write(changes))
                if events:
                    written.extend(events)
                    events.clear()
            await asyncio.sleep(0)
        self.export_gauges()
        # The changelog records must be on the broker before their inputs may be committed,
        # or a SIGKILL right after the commit would lose the last samples: wait for delivery.
        try:
            await asyncio.gather(*delivered)
        except Exception as exc:  # a window the changelog lost: its inputs must not be committed
            log.error("changelog write failed, stopping: %r", exc)
            await self.app.crash(exc)
            return
        for start in range(0, len(written), ACK_SLICE):
            for event in written[start:start + ACK_SLICE]:
                event.ack()
            await asyncio.sleep(0)

    def export_gauges(self) -> None:
        follower, seen = self.follower, self._metrics_seen
        self.metrics.active_entities.set(sum(len(c) for c in self.caches.values()))
        self.metrics.config_watermark_age.set(max(0.0, time.time() - follower.confirmed_ms / 1000.0))
        self.metrics.config_late.inc(follower.late - seen["late"])
        self.metrics.config_missed.inc(follower.missed - seen["missed"])
        seen["late"], seen["missed"] = follower.late, follower.missed
        for label, count in follower.refused.items():
            self.metrics.config_refused.labels(label).inc(count - seen[f"refused {label}"])
            seen[f"refused {label}"] = count

    async def flush_loop(self) -> None:
        """Flush on a fixed cadence, so records are acked (and committed) even when input
        stops, those held by a quiet partition's clock included."""
        interval = self.settings.flush_interval_ms / 1000.0
        exported = time.monotonic()
        last: Counter[str] = Counter()
        while True:
            await asyncio.sleep(interval)
            if self.outbox.held:  # left by a take cut short (a rebalance or an error mid-take)
                await self.send_outbox()
            await self.settle_quiet(int(time.time() * 1000))
            await self.flush_all()
            for tp, offset in self.continuity.due(time.monotonic()):
                log.warning("%s: nothing delivered since seeking back to %d; seeking again",
                            tp, offset)
                self.seek_back(tp, offset)
            self.export_lag()
            self.chart_windows()
            elapsed = time.monotonic() - exported
            if elapsed >= 10.0:
                self.export_windows(elapsed)
                exported = time.monotonic()
                delta = self.stats - last
                last = self.stats.copy()
                log.info("last %.0f s: %d samples (%.0f/s) in %d engine steps, "
                         "%d directives, %d windows written, %d expired", elapsed,
                         delta["samples"], delta["samples"] / elapsed, delta["records"],
                         delta["directives"], delta["windows_written"], delta["expired"])

    def chart_windows(self) -> None:
        """A point a second on the console's charted windows: each one's rate now (read, not
        measured: the window is left as it is) and its usage per source since the last point
        (counted by the engine's checks on a charted `Window`: `Window.sources`)."""
        n, w = self.engine_settings.window_num, self.engine_settings.window_ms
        now_ms = int(time.time() * 1000)
        history = self.windows.history
        for key in history.take_dropped():
            found = self.windows.locate(key)
            if found is not None and isinstance(found[1], Window):
                found[1].sources = None
        elapsed_s = max(1, now_ms // 1000 - history.last_s)

        def reading(key: str) -> tuple[float, float | None, dict[int, float]] | None:
            found = self.windows.locate(key)
            if found is None:
                return None
            partition, check = found
            return chart_reading(check, self.state_of(partition, key), now_ms, n, w, elapsed_s)

        history.record(now_ms // 1000, reading)

    def export_windows(self, elapsed_s: float) -> None:
        """The top entities' gauges, and the console's choice of windows to chart, from the
        windows checked over the last `elapsed_s`."""
        now_ms = int(time.time() * 1000)
        since = now_ms - int(elapsed_s * 1000)
        windows = self.windows
        busiest, over = windows.busiest(max(self.top_entities.top_n, windows.history.capacity),
                                        since)
        self.top_entities.export([check for _, check in busiest[:self.top_entities.top_n]], over)
        windows.history.choose([key for key, _ in busiest], now_ms // 1000)
        windows.prune(now_ms)

    def export_lag(self) -> None:
        """Records behind the last fetch's high watermark, and how long records waited to be
        taken (`LagMeter`)."""
        self.metrics.lag.clear()
        self.metrics.lag_seconds.clear()
        now_ms = time.time() * 1000.0
        for tp in self.app.consumer.assignment():
            try:
                highwater = self.app.consumer.highwater(tp)
            except Exception:  # not fetched yet
                continue
            if highwater is None or tp not in self.processed:
                continue
            behind = max(0, highwater - self.processed[tp])
            labels = (tp.topic, str(tp.partition))
            self.metrics.lag.labels(*labels).set(behind)
            self.metrics.lag_seconds.labels(*labels).set(self.lag_meter.reading(tp, behind, now_ms))

    async def on_revoked(self, sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        """Forget windows of partitions this worker lost; their new owner restores the table."""
        async with self.state_lock:
            for tp in revoked:
                # its next owner may move the clock on, and reads the held records again
                self.streams.pop((tp.topic, tp.partition), None)
                self.processed.pop(tp, None)
                self.lag_meter.forget(tp)
                self.continuity.forget(tp)
                if tp.topic == self.samples_name:
                    self.caches.pop(tp.partition, None)
                    self.windows.forget_partition(tp.partition)
                    self.pending.pop(tp.partition, None)
            self.engine.forget_states()  # the engine's references to the dropped caches' states

    def readiness(self) -> tuple[bool, list[int]]:
        """Ready (configs read, tables recovered), and the samples partitions owned."""
        ready = self.follower.ready.is_set() and self.app.tables.recovery.completed.is_set()
        self.metrics.recovery_complete.set(1 if ready else 0)
        owned = sorted(tp.partition for tp in self.app.consumer.assignment()
                       if tp.topic == self.samples_name)
        return ready, owned
