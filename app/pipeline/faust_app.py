"""The Faust app: brokers' events in, throttle directives out.

Topology (all quota logic is in `app.engine`; this module only moves bytes and state):

    quota.events.{request,connection,mutation}   (contract records, keyed by principal)
        -> agent `ingest`: validate, dead-letter bad events, resolve the quota entity and
           re-key: rows grouped per destination partition, many events per record
    <app_id>-samples                              (internal, partitioned by crc32(route key))
        -> agent `aggregate`: QuotaEngine over windows in the `entity-windows` RocksDB table,
           directives sent as soon as they are decided; idle windows expire
    quota.directives                              (the control topic)

Run it with `quota-streams worker` (or `faust -A app.pipeline.faust_app worker -l info`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, defaultdict
from typing import Any, cast

import faust
from mode import CrashingSupervisor
import orjson
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP

from app import metrics
from app.engine.engine import EngineSettings, QuotaEngine
from app.engine.events import StreamClock
from app.gc_tuning import tune_gc
from app.kafka_security import KafkaSecurity
from app.pipeline.aggregate import apply_rows
from app.pipeline.clock_seed import ClockSeeder
from app.pipeline.codec import decode_rows, encode_rows, latest_arrival, latest_ts
from app.pipeline.config_follower import ConfigFollower
from app.pipeline.ingest import MAX_ROWS, Outbox, parse_source, route_events
from app.pipeline.partitioner import MemoPartitioner
from app.pipeline.routing import Router
from app.pipeline.topology import samples_topic
from app.replay import encode_deadletter
from app.settings import Settings, load
from app.signing import Signing
from tables.entity_state import TABLE_NAME, PartitionCache
from tables.faust_store import PartitionStore, raw_table
from tables.recovery import install_highwater_fix

log = logging.getLogger("quota_streams")

tune_gc()  # also under `faust -A app.pipeline.faust_app worker`, which skips app.cli
settings: Settings = load()
bootstrap = str(settings.kafka_bootstrap_servers or "127.0.0.1:9092")

app = faust.App(
    settings.app_id,
    broker=[f"kafka://{host.strip()}" for host in bootstrap.split(",")],
    store="rocksdb://",
    datadir=settings.state_dir,
    topic_partitions=settings.partitions,
    table_standby_replicas=settings.standby_replicas,
    consumer_auto_offset_reset="earliest",
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=10.0,
    broker_commit_interval=1.0,
    producer_acks=-1,
    web_bind=settings.web_host,
    web_port=settings.web_port,
    # Faust's own pages would dump table rows (user names, usage) and the partition of any key:
    # the worker serves /metrics and /ready only.
    web_tables_enabled=False,
    web_router_enabled=False,
    web_graph_enabled=False,
    web_stats_enabled=False,
    key_serializer="raw",
    value_serializer="raw",
    producer_partitioner=MemoPartitioner(),
    broker_credentials=KafkaSecurity.from_settings(settings).faust(),
)
# Tansu under-reports end offsets; confirm them by fetching (no-op on a real Kafka cluster).
install_highwater_fix(app, enabled=bool(settings.verify_end_offsets))

FETCH_MAX_WAIT_MS = 10
#: source records the ingest takes at once at most (each holds up to a few hundred samples)
TAKE_MAX_RECORDS = 64
_create_worker_consumer = AIOKafkaConsumerThread._create_worker_consumer


def _short_fetch_wait(self: Any, *args: Any, **kwargs: Any) -> Any:
    """Faust hard-codes fetch_max_wait_ms=1500; a broker may hold a multi-partition fetch for a
    good part of that even with records waiting (Tansu: ~0.5 s per hop, two hops per event).
    Directives are sent when decided, so the wait is the latency, paid once per hop: cap it at
    10 ms (an idle worker then polls 100 times a second, a small cost)."""
    consumer = _create_worker_consumer(self, *args, **kwargs)
    consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
    return consumer


AIOKafkaConsumerThread._create_worker_consumer = _short_fetch_wait  # type: ignore[method-assign]

engine_settings = EngineSettings(
    scope=str(settings.scope), accounting=str(settings.accounting),
    window_num=int(settings.quota_window_num),
    window_ms=int(settings.quota_window_size_ms),
    controller_window_num=int(settings.controller_window_num),
    controller_window_ms=int(settings.controller_window_size_ms),
    config_grace_ms=int(settings.config_grace_ms),
    idle_expiry_ms=int(settings.idle_expiry_ms),
    allocations=settings.scope == "cluster" and settings.cluster_enforcement == "allocations",
    allocation_validity_ms=int(settings.allocation_validity_ms),
)
engine = QuotaEngine(engine_settings)
partitions = int(settings.partitions)
router = Router(engine, partitions)

source = app.topic(settings.topic_request, settings.topic_connection, settings.topic_mutation)
samples = app.topic(samples_topic(settings), partitions=partitions, internal=True)
samples_name = samples.get_topic_name()
directives_name = str(settings.topic_directives)
deadletter_topic = app.topic(settings.topic_deadletter)
state_table = raw_table(app.Table(TABLE_NAME, partitions=partitions, key_type=bytes,
                                  value_type=bytes))

signing = Signing.parse(str(settings.signing_keys))
follower = ConfigFollower(bootstrap, str(settings.topic_configs), engine.timeline, signing=signing)
hold_max_s = int(settings.config_hold_max_ms) / 1000.0
top_entities = metrics.TopEntities(int(settings.metrics_top_n))
caches: dict[int, PartitionCache] = {}
pending: dict[int, list[Any]] = defaultdict(list)
outbox = Outbox()  # the ingest's rows not yet sent to the samples topic
state_lock = asyncio.Lock()
clocks: dict[tuple[str, int], StreamClock] = {}
seeder = ClockSeeder(bootstrap)
stats: Counter[str] = Counter()  # for the periodic progress line in the log
metrics_seen: Counter[str] = Counter()  # follower counters already exported
processed: dict[TP, int] = {}  # next offset to process per source/samples partition (lag gauge)


async def produce(topic: str, value: bytes, key: bytes | None = None, partition: int | None = None) -> None:
    """Hand a record to the Kafka client, skipping Faust's per-message topic machinery
    (futures, callbacks, sensors), which cost several times the client's own send. Faust still
    flushes this producer before every offset commit, so at-least-once holds as with `send`."""
    delivery = await app.producer.send(topic, key, value, partition, None, None)
    cast(asyncio.Future, delivery).add_done_callback(_delivered)


def _delivered(delivery: asyncio.Future) -> None:
    """A record the client gave up on stops the worker before its input can be committed."""
    if not delivery.cancelled() and delivery.exception() is not None:
        log.error("send failed, stopping: %r", delivery.exception())
        asyncio.ensure_future(app.crash(cast(BaseException, delivery.exception())))


async def send_deadletter(reason: str, raw: Any, source_name: str, key: bytes | None = None) -> None:
    metrics.DEADLETTER.labels(metrics.reason_label(reason)).inc()
    await deadletter_topic.send(key=key, value=encode_deadletter(reason, raw, source_name))


@app.task
async def start_config_follower() -> None:
    await follower.start()


# An agent that raises takes the worker down (exit code != 0) instead of being restarted in
# place: Faust's default restart left the crashed agent's partitions unprocessed, with /ready
# still saying ready and SIGTERM no longer stopping the worker. The orchestrator restarts the
# process, which resumes from the committed offsets.
@app.agent(source, supervisor_strategy=CrashingSupervisor)
async def ingest(stream: faust.StreamT) -> None:
    """Validate contract records and re-key their events by resolved quota entity.

    The records that arrive within QS_INGEST_LINGER_MS (at most TAKE_MAX_RECORDS) are taken
    together, held until the config topic is known past their arrival (`hold`), and their rows
    go out as one internal record per samples partition (sooner if MAX_ROWS wait). Faust hands
    records over one at a time, a few event-loop turns apart, so "send when nothing more is
    buffered" sent every 300-sample record as ~40-row records at saturation; the linger cut
    internal records ~4x and Faust's per-record work with them. `noack_take`, not
    `take_events`: the latter acks its records when the body exits, even by an exception,
    before their rows were sent. Here `send_outbox` acks them once they were.
    """
    await follower.ready.wait()
    linger = int(settings.ingest_linger_ms) / 1000.0
    async for events in stream.noack_take(TAKE_MAX_RECORDS, within=linger):
        await hold(max(arrival_ms(event) for event in events), "ingest")
        for event in events:
            await route(event)
        await send_outbox()


def arrival_ms(event: faust.EventT) -> int:
    """A record's Kafka timestamp in ms: when its events arrived (`app.engine.timeline`)."""
    return int(event.message.timestamp * 1000)


async def hold(arrival: int, stage: str) -> None:
    """Wait until every config that reached Kafka by `arrival` plus the grace is known, so an
    event is judged by the same configs whenever the worker happens to read them. The rule
    needs those up to half the grace after `arrival` (`app.engine.timeline`); the other half
    covers the clocks (config writers', brokers', this worker's). Costs about the grace plus
    one follower poll of latency."""
    need = arrival + engine_settings.config_grace_ms
    if follower.confirmed_ms < need:
        metrics.CONFIG_HELD.labels(stage).inc()
        started = time.monotonic()
        if not await follower.wait_confirmed(need, hold_max_s):
            metrics.CONFIG_HOLD_EXPIRED.labels(stage).inc()
            log.warning("%s: config topic not confirmed within QS_CONFIG_HOLD_MAX_MS; going on",
                        stage)
        metrics.CONFIG_HOLD_SECONDS.labels(stage).observe(time.monotonic() - started)


async def route(event: faust.EventT) -> None:
    """One source record's rows into the outbox, its bad events to the dead-letter topic."""
    message = event.message
    processed[message.tp] = message.offset + 1
    clock = clocks.get((message.topic, message.partition))
    if clock is None:
        clock = clocks[(message.topic, message.partition)] = await seeded_clock(message)
    arrival = arrival_ms(event)
    events, dead = parse_source(event.value, clock)
    if events:
        route_events(events, router, arrival, outbox)
        follower.released(arrival, max(e.ts for e in events))
    outbox.held.append(event)
    metrics.EVENTS.labels(message.topic).inc()
    if dead:
        where = f"{message.topic}/{message.partition}@{message.offset}"
        for reason, raw in dead:
            await send_deadletter(reason, raw, where, event.key)
    if outbox.size >= MAX_ROWS:
        await send_outbox()


async def seeded_clock(message: Any) -> StreamClock:
    """The clock a worker that had read the partition from its start would have here."""
    clock = StreamClock()
    found = await seeder.timestamps(message.topic, message.partition, message.offset)
    metrics.CLOCK_SEEDS.labels("failed" if found is None else "seeded").inc()
    if found:
        clock.seed(found)
    return clock


async def send_outbox() -> None:
    """One internal record per samples partition; then ack the source records they came from."""
    rows, held, counts = outbox.take()
    for partition, part_rows in rows.items():
        await produce(samples_name, encode_rows(part_rows), partition=partition)
    for t, n in counts.items():
        metrics.SAMPLES.labels(t).inc(n)
    for event in held:
        event.ack()


@app.agent(samples, supervisor_strategy=CrashingSupervisor)
async def aggregate(stream: faust.StreamT) -> None:
    """Run the engine over each partition's windows; publish directives at once."""
    await follower.ready.wait()
    async for event in stream.noack().events():
        partition = event.message.partition
        processed[event.message.tp] = event.message.offset + 1
        rows = decode_rows(event.value)
        await hold(latest_arrival(rows), "aggregate")  # known here already, unless another
        async with state_lock:                           # worker's ingest routed them
            cache = caches.get(partition)
            if cache is None:
                cache = caches[partition] = partition_cache(partition)
            engine.store = cache
            out = apply_rows(engine, rows, top_entities.latest)
            stats["samples"] += len(rows)
            stats["records"] += 1
            now = latest_ts(rows)
            if cache.sweeps.due(now):
                expired = engine.expire(now)
                stats["expired"] += len(expired)
                metrics.WINDOWS_EXPIRED.inc(len(expired))
            cache.mark(engine.drain_touched())
            pending[partition].append(event)
        for directive, appended_ms in out:
            await publish(directive, appended_ms)


def partition_cache(partition: int) -> PartitionCache:
    """A partition's windows, all of them read (an expiry sweep then sees every one)."""
    cache = PartitionCache(PartitionStore(state_table, partition),
                           engine_settings.sweep_every_ms)
    started = time.monotonic()
    loaded = cache.load_all()
    if loaded:
        log.info("partition %d: %d windows loaded in %.1f s", partition, loaded,
                 time.monotonic() - started)
    return cache


async def publish(directive: dict[str, Any], appended_ms: int) -> None:
    stats["directives"] += 1
    key = directive["quota"].encode() + b"|" + orjson.dumps(directive["entity"])
    await produce(directives_name, signing.seal(directives_name, orjson.dumps(directive)), key=key)
    if directive.get("kind") == "allocation":  # a cluster-scope allocation (no throttle of its own)
        metrics.DIRECTIVES.labels(directive["quota"], "allocation").inc()
    else:
        metrics.DIRECTIVES.labels(directive["quota"], directive["action"]).inc()
        metrics.THROTTLE_MS.observe(directive["throttle_time_ms"])
    metrics.LATENCY.observe(max(0.0, time.time() - appended_ms / 1000.0))


async def flush_all() -> None:
    """Write each partition's dirty windows once, then ack the records that changed them.

    One partition at a time under the state lock, yielding between them, and the wait for
    the changelog's delivery outside it: the agents keep running meanwhile instead of stalling
    for the whole flush (a latency spike once per flush interval).

    """
    written: list[Any] = []
    delivered: list[Any] = []
    for partition in list(pending):
        async with state_lock:
            events = pending.get(partition)
            if not events:
                continue
            cache = caches.get(partition)
            if cache is not None and (cache.dirty or cache.deleted):
                changes = cache.flush()
                stats["windows_written"] += len(changes)
                delivered.append(await cache.store.write(changes))
            written.extend(events)
            events.clear()
        await asyncio.sleep(0)
    metrics.ACTIVE_ENTITIES.set(sum(len(c) for c in caches.values()))
    metrics.CONFIG_WATERMARK_AGE.set(max(0.0, time.time() - follower.confirmed_ms / 1000.0))
    metrics.CONFIG_LATE.inc(follower.late - metrics_seen["late"])
    metrics.CONFIG_MISSED.inc(follower.missed - metrics_seen["missed"])
    metrics_seen["late"], metrics_seen["missed"] = follower.late, follower.missed
    # The changelog records must be on the broker before their inputs may be committed,
    # or a SIGKILL right after the commit would lose the last rows: wait for delivery.
    try:
        await asyncio.gather(*delivered)
    except Exception as exc:  # a window the changelog lost: its inputs must not be committed
        log.error("changelog write failed, stopping: %r", exc)
        await app.crash(exc)
        return
    for event in written:
        event.ack()


@app.task
async def flush_loop() -> None:
    """Flush on a fixed cadence, so records are acked (and committed) even when input stops."""
    interval = int(settings.flush_interval_ms) / 1000.0
    exported = time.monotonic()
    last: Counter[str] = Counter()
    while True:
        await asyncio.sleep(interval)
        if outbox.held:  # left by a take cut short (a rebalance or an error mid-take)
            await send_outbox()
        await flush_all()
        elapsed = time.monotonic() - exported
        if elapsed >= 10.0:
            export_lag()
            top_entities.export()
            exported = time.monotonic()
            delta = stats - last
            last = stats.copy()
            log.info("last %.0f s: %d samples (%.0f/s) in %d internal records, %d directives, "
                     "%d windows written, %d expired", elapsed, delta["samples"],
                     delta["samples"] / elapsed, delta["records"], delta["directives"],
                     delta["windows_written"], delta["expired"])


def export_lag() -> None:
    """Records behind the fetch high watermark (right even where ListOffsets under-reports)."""
    metrics.LAG.clear()
    for tp in app.consumer.assignment():
        try:
            highwater = app.consumer.highwater(tp)
        except Exception:  # not fetched yet
            continue
        if highwater is not None and tp in processed:
            metrics.LAG.labels(tp.topic, str(tp.partition)).set(max(0, highwater - processed[tp]))


@app.on_partitions_revoked.connect
async def on_revoked(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
    """Forget windows of partitions this worker lost; their new owner restores the table."""
    async with state_lock:
        for tp in revoked:
            clocks.pop((tp.topic, tp.partition), None)  # its next owner may move it on
            if tp.topic == samples_name:
                caches.pop(tp.partition, None)
                pending.pop(tp.partition, None)
        engine.forget_states()  # the engine's references to the dropped caches' states


@app.page("/metrics")
async def metrics_page(web: Any, request: Any) -> Any:
    return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")


@app.page("/ready")
async def ready_page(web: Any, request: Any) -> Any:
    ready = follower.ready.is_set() and app.tables.recovery.completed.is_set()
    metrics.RECOVERY_COMPLETE.set(1 if ready else 0)
    owned = sorted(tp.partition for tp in app.consumer.assignment() if tp.topic == samples_name)
    return web.json({"ready": ready, "partitions": owned}, status=200 if ready else 503)
