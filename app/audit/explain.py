"""`explain`: why was (or wasn't) an entity throttled at a time, from a replay of the input.

No Spark: the input is read in-process (event topics through the data source's planning and
reader functions, the config topic as the admin tools read it, or archive files) and run
through the audit's own exploder and ordering rules (`app.audit.recompute`), keeping only
events that touch the entity's windows (windows are independent, so the others cannot change
the answer). Each stream is replayed up to the point
where its stream time passes `--at`, i.e. what the pipeline had seen by then.

For each quota window the entity was last decided in at or before `--at`, it shows the config
level that chose the limit (and the precedence Kafka checked), the window's samples, the
observed rate, the throttle formula with the numbers, and the directive that resulted.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from app.audit.common import entity_candidates
from app.audit.event_codec import EVENT_KINDS, make_event
from app.audit.request_items import ROW_REQUEST, append_request
from app.audit.explode import ExplodeContext, ExplodedRows, StreamExploder
from app.audit.recompute import (
    MODE_FILE,
    MODE_KAFKA,
    ConfigEntry,
    archive_configs,
    engine_with_configs,
)
from app.contract.entities import entity_string
from app.engine import configs as cfg
from app.engine.engine import Decision, EngineSettings
from app.engine.batch import RequestColumns
from app.engine.events import ConnectionEvent, MutationEvent, RequestEvent
from app.engine.allocation import Shares
from app.engine.stats import Rate, TokenBucket
from app.explanation import Explanation, Snapshot
from app.intake.files import open_input
from app.kafka.security import KafkaSecurity
from app.signing import Signing


class ExplainError(ValueError):
    """Bad input for explain (one line for the user)."""


# -- reading ---------------------------------------------------------------------------------


#: (stream, position, value, Kafka timestamp or None): `recompute_local`'s input records
Record = tuple[Any, int, "bytes | None", "int | None"]
Input = tuple[str, dict[Any, int], list[Record], list[ConfigEntry]]


def read_files(paths: list[str]) -> Input:
    """Archive files -> (mode, streams, records, configs), in the audit's order."""
    files: list[str] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files += [str(f) for f in sorted(p.rglob("*")) if f.is_file()
                      and not f.name.startswith((".", "_"))]
        elif p.exists():
            files.append(str(p))
        else:
            raise ExplainError(f"input {raw} does not exist")
    if not files:
        raise ExplainError("no input files")
    files.sort()
    parquet = [f for f in files if f.endswith((".parquet", ".pq"))]
    if parquet and len(parquet) != len(files):
        raise ExplainError("inputs mix Parquet and JSON lines; pass one kind")
    if parquet:
        return _read_parquet(parquet)
    records: list[Record] = []
    for name in files:
        with open_input(name) as fh:
            for line_no, line in enumerate(fh):
                records.append((name, line_no, line, None))
    return (MODE_FILE, {name: i for i, name in enumerate(files)}, records,
            archive_configs(r[2] for r in records)[0])


def _read_parquet(files: list[str]) -> Input:
    import pyarrow.parquet as pq

    tables = [pq.read_table(f) for f in files]
    names = set(tables[0].column_names)
    if {"topic", "partition", "offset", "value"} <= names:
        raise ExplainError("Kafka-shaped Parquet dumps: use --input kafka or the audit")
    records: list[Record] = []
    for name, table in zip(files, tables):
        for row_no, row in enumerate(table.to_pylist()):
            value = row.get("value") if "value" in row else {k: v for k, v in row.items() if v is not None}
            if isinstance(value, str):
                value = value.encode()
            elif not isinstance(value, (bytes, bytearray)):
                value = orjson.dumps(value)
            records.append((name, row_no, bytes(value), None))
    return (MODE_FILE, {name: i for i, name in enumerate(files)}, records,
            archive_configs(r[2] for r in records)[0])


def read_kafka(bootstrap: str, topics: Any, security: KafkaSecurity, signing: Signing) -> Input:
    """The event and config topics, read on the driver with `security`; configs `signing`
    does not open are skipped, as the workers skip them."""
    from app.audit.kafka_reads import existing_topics, read_configs, read_events

    present = existing_topics(bootstrap, security)
    records: list[Record] = []
    tps: set[tuple[str, int]] = set()
    for topic in topics.events:
        if topic not in present:
            continue
        for partition, offset, _key, value, timestamp in read_events(bootstrap, topic, security):
            records.append(((topic, partition), offset, value, timestamp))
            tps.add((topic, partition))
    configs: list[ConfigEntry] = []
    if topics.configs in present:
        configs, _bad = read_configs(bootstrap, topics.configs, security, signing)
    records.sort(key=lambda r: (r[0], r[1]))
    return MODE_KAFKA, {tp: i for i, tp in enumerate(sorted(tps))}, records, configs


# -- matching --------------------------------------------------------------------------------


def target_keys(spec: dict[str, str]) -> set[str]:
    keys = set()
    if "user" in spec:
        keys.add(f"u:{spec['user']}")
    if "client_id" in spec:
        keys.add(f"c:{spec['client_id']}")
    if "ip" in spec or "broker" in spec or "listener" in spec:
        keys.add("connections")
    return keys


def principal_matches(spec: dict[str, str], event: Any) -> bool:
    """Does the event come from the principal (or connection source) the spec names?"""
    if isinstance(event, (RequestEvent, MutationEvent)):
        if not ({"user", "client_id"} & spec.keys()):
            return False
        return (spec.get("user", event.user) == event.user
                and spec.get("client_id", event.client_id) == event.client_id)
    if isinstance(event, ConnectionEvent):
        if not ({"ip", "broker", "listener"} & spec.keys()):
            return False
        return (spec.get("ip", event.ip) == event.ip
                and spec.get("broker", str(event.broker)) == str(event.broker)
                and spec.get("listener", event.listener) == event.listener)
    return False


def _copy_state(state: Any) -> Any:
    if isinstance(state, (Rate, Shares)):
        return copy.deepcopy(state)
    if isinstance(state, TokenBucket):
        return copy.copy(state)
    return state


# -- the replay ------------------------------------------------------------------------------


def explain(spec: dict[str, str], at: int, settings: EngineSettings, mode: str,
            streams: dict[Any, int], records: Iterable[Record], configs: list[ConfigEntry],
            source: str = "", quotas: set[str] | None = None) -> Explanation:
    """Replay up to `at` and keep, per window of the entity, its last decision."""
    ctx = ExplodeContext(settings, mode, tuple(configs), streams, stop_after=at,
                         keep=frozenset(target_keys(spec)))
    exploders: dict[Any, StreamExploder] = {}
    out = ExplodedRows(ctx.pinned)
    rows: list[tuple[tuple[int, int, int, int], int, Any, int]] = []

    def drain() -> None:
        for t, s, pos, i, k, payload, arrival in out.items():
            if k in EVENT_KINDS:
                rows.append(((t, s, pos, i), k, payload, arrival))
        out.clear()

    for stream, pos, value, timestamp in records:
        clock_key = stream if mode == MODE_KAFKA else None
        ex = exploders.get(clock_key)
        if ex is None:
            ex = exploders[clock_key] = StreamExploder(ctx)
        ex.feed(streams[stream], pos, value, out, lambda: "", timestamp)
        if len(out) >= 10_000:
            drain()
    for ex in exploders.values():
        ex.finish(out)
    drain()
    rows.sort(key=lambda r: r[0])

    seen = sum(e.events + e.skipped for e in exploders.values())
    result = Explanation(spec, at, source, events_seen=seen,
                         configs=sum(1 for update, _ in configs if update.ts <= at))
    engine = engine_with_configs(settings, configs)
    names = set(entity_candidates(spec))
    allocations: dict[tuple[str, str], dict[str, Any]] = {}
    for _key, kind, payload, arrival in rows:
        if kind == ROW_REQUEST:
            batch = RequestColumns()
            append_request(batch, payload, arrival)
            per_row: list[list[Decision]] = []
            directives = [d for d, _ in engine.process_requests(batch, per_row)]
            decisions, event = per_row[0], batch.event(0)
        else:
            event = make_event(kind, payload)
            decisions, directives = engine.process(event, arrival)
        result.events_used += 1
        mine = principal_matches(spec, event)
        throttled = any(d.throttle_time_ms > 0 for d in decisions)
        published = {}
        for record in directives:
            if record.get("kind") == "allocation":
                allocations[(record["quota"], entity_string(record["entity"]))] = record
            else:
                published[(id(record["entity"]), record["quota"])] = record
        for d in decisions:
            name = entity_string(d.entity)
            if not (mine or name in names):
                continue
            if quotas and d.quota not in quotas:
                continue
            wkey = (d.quota, d.broker, name)
            result.windows[wkey] = Snapshot(
                d, event, _copy_state(engine.store.get(d.key)),
                published.get((id(d.entity), d.quota)), throttled,
                engine.timeline.at(event.ts, arrival).configs.resolution_view(d.quota, d.entity),
                allocations.get((d.quota, name)))
            result.state_at[wkey] = engine.store.get(d.key)
    return result


# -- text ------------------------------------------------------------------------------------

def iter_quota_names() -> Iterator[str]:
    yield from (cfg.PRODUCE, cfg.FETCH, cfg.REQUEST, cfg.MUTATION, cfg.IP_RATE, cfg.BROKER_RATE)
