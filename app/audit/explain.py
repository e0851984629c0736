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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.audit.common import entity_candidates, entity_string, format_ms
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
from app.engine import configs as cfg
from app.engine.engine import ALLOCATED, NANOS_TO_PERCENT, Decision, EngineSettings
from app.engine.batch import RequestColumns
from app.engine.events import ConnectionEvent, MutationEvent, RequestEvent
from app.engine.kafka_math import INT_MAX_F, UNLIMITED
from app.engine import allocation
from app.engine.allocation import Shares
from app.engine.stats import Rate, TokenBucket
from app.intake.files import open_input
from app.kafka.security import KafkaSecurity
from app.signing import Signing


class ExplainError(ValueError):
    """Bad input for explain (one line for the user)."""


@dataclass
class Snapshot:
    """The last decision of one window at or before `at`, and the window right after it."""

    decision: Decision
    event: Any
    state: Any
    directive: dict[str, Any] | None
    event_throttled: bool
    configs: Any
    #: allocations (cluster scope): the window's last allocation record at or before the decision
    allocation: dict[str, Any] | None = None


@dataclass
class Explanation:
    entity: dict[str, str]
    at: int
    source: str
    events_seen: int = 0
    events_used: int = 0
    configs: int = 0
    windows: dict[tuple[str, Any, str], Snapshot] = field(default_factory=dict)
    state_at: dict[tuple[str, Any, str], Any] = field(default_factory=dict)


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

UNIT = {cfg.PRODUCE: "B/s", cfg.FETCH: "B/s", cfg.REQUEST: "% (of one thread)",
        cfg.MUTATION: "partitions/s", cfg.IP_RATE: "connections/s",
        cfg.BROKER_RATE: "connections/s"}


def _num(x: float) -> str:
    if x >= UNLIMITED or x == INT_MAX_F:
        return "unlimited"
    return f"{x:,.6g}" if abs(x) < 1e7 else f"{x:,.0f}"


def _event_text(event: Any) -> str:
    if isinstance(event, RequestEvent):
        extra = f", {event.bytes:,} bytes" if event.api in ("Produce", "Fetch") and \
            event.count else ""
        counted = f", count {event.count}" if event.count > 1 else \
            ", the time of a request counted with its bytes" if not event.count else ""
        return (f"{event.api} from user={event.user!r} client_id={event.client_id!r} on broker "
                f"{event.broker}{extra}, thread {event.thread_ms} ms, network {event.network_ms} ms"
                + counted)
    if isinstance(event, MutationEvent):
        return (f"{event.api} v{event.api_version} ({'strict' if event.strict else 'permissive'}) "
                f"from user={event.user!r} client_id={event.client_id!r}: {event.partitions} "
                f"partitions on broker {event.broker}")
    return (f"connection from {event.ip} on broker {event.broker} listener {event.listener!r}"
            + (" (inter-broker)" if event.inter_broker else ""))


def render(x: Explanation, settings: EngineSettings) -> str:
    lines = [f"explain {entity_string(x.entity)} at {format_ms(x.at)} ({x.at})",
             f"input: {x.source}; replayed {x.events_used:,} of {x.events_seen:,} events "
             f"(those touching this entity's windows), {x.configs} config changes in force by then",
             ""]
    if not x.windows:
        lines.append("no decision for this entity at or before that time (no event of it, or "
                     "no quota configured for it)")
        return "\n".join(lines)
    for wkey in sorted(x.windows, key=lambda k: (k[0], -1 if k[1] is None else k[1], k[2])):
        lines += window_text(x, wkey, settings)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def window_text(x: Explanation, wkey: tuple[str, Any, str], settings: EngineSettings,
                at_label: str = "at --at") -> list[str]:
    """One window's explanation; `at_label` names the time `x.at` (the console's: now). A
    snapshot without its event (the console's, from a live window) names none."""
    snap = x.windows[wkey]
    d = snap.decision
    quota, broker, name = wkey
    where = "all brokers (cluster scope)" if broker is None else f"broker {broker}"
    unit = UNIT.get(quota, "")
    out = [f"{quota} · window {name or '(all)'} · {where}"]
    out.append(f"  limit      T = {_num(d.limit)} {unit}"
               + (f" from {d.config_level}" if d.config_level else " (no config level: unlimited)"))
    checked = "  >  ".join(f"{path} = {'-' if v is None else _num(v)}" for path, v in snap.configs)
    if checked:
        out.append(f"  precedence {checked}")
    what = "its latest sample" if snap.event is None else _event_text(snap.event)
    out.append(f"  decision   at {format_ms(d.ts)} ({d.ts}) for {what}")
    state = snap.state
    if isinstance(state, Rate):
        n, w = (settings.window_num, settings.window_ms)
        out.append(f"  samples    N={n} x W={w} ms after this event (oldest first):")
        for value, start, _ in sorted(state.samples(), key=lambda sample: sample[1]):
            out.append(f"               start {format_ms(start)}  value {_num(value)}")
        total_after = state.total()
        adjust = _after_adjustment(snap, quota)
        total = d.observed * d.window_ms / 1000.0
        out.append(f"  observed   O = sum / window = {_num(total)} / {d.window_ms / 1000:.3f} s = "
                   f"{_num(d.observed)} {unit}")
        if adjust:
            out.append(f"             (samples now sum to {_num(total_after)}: {adjust})")
        raw = (d.observed - d.limit) / d.limit * d.window_ms if d.limit else float("inf")
        if quota in (cfg.REQUEST, cfg.IP_RATE, cfg.BROKER_RATE):
            formula = (f"min(round((O - T) / T * window), W) = min(round(({_num(d.observed)} - "
                       f"{_num(d.limit)}) / {_num(d.limit)} * {d.window_ms}), {w}) = "
                       f"min(round({_num(raw)}), {w})")
        else:
            formula = (f"round((O - T) / T * window) = round(({_num(d.observed)} - {_num(d.limit)})"
                       f" / {_num(d.limit)} * {d.window_ms}) = round({_num(raw)})")
        if d.observed <= d.limit:
            out.append("  throttle   0 ms: O <= T, no throttle")
        else:
            out.append(f"  throttle   {formula} = {d.throttle_time_ms:,} ms")
        live = x.state_at.get(wkey)
        if isinstance(live, Rate):
            probe = copy.deepcopy(live)
            rate, window = probe.measure(max(x.at, probe.clock), n, w)
            out.append(f"  {at_label:<10} rate {_num(rate)} {unit} over {window / 1000:.3f} s "
                       "(no new sample)")
    elif isinstance(state, TokenBucket):
        n, w = settings.controller_window_num, settings.controller_window_ms
        burst = n * (w / 1000.0) * d.limit
        out.append(f"  bucket     Q = {_num(d.limit)}/s, burst = N*W*Q = {n} * {w / 1000:g} s * "
                   f"{_num(d.limit)} = {_num(burst)}; tokens after the event {_num(state.tokens)}")
        if d.action == "reject":
            out.append(f"  throttle   strict request while the bucket is in debt: reject, "
                       f"round(-tokens / Q * 1000) = {d.throttle_time_ms:,} ms")
        elif d.throttle_time_ms > 0:
            out.append(f"  throttle   round(-tokens / Q * 1000) = round({_num(-d.observed)} / "
                       f"{_num(d.limit)} * 1000) = {d.throttle_time_ms:,} ms")
        else:
            out.append("  throttle   0 ms: tokens >= 0")
    if settings.allocations and quota in ALLOCATED:
        out += _allocation_text(snap.allocation, unit, settings)
    elif snap.directive is not None:
        out.append("  directive  published: " + orjson.dumps(snap.directive).decode())
    elif d.throttle_time_ms > 0:
        until = getattr(snap.state, "until", 0)
        out.append(f"  directive  none published: one is active until {format_ms(until)} "
                   f"({until}) and this decision would not move it later by more than "
                   f"{settings.extension_ms} ms")
    else:
        out.append("  directive  none (not throttled)")
    return out


def _allocation_text(record: dict[str, Any] | None, unit: str, settings: EngineSettings
                     ) -> list[str]:
    """What each enforcer (named gateway, else broker) was allowed of a cluster-scope quota
    (allocations), and why."""
    if record is None:
        return [f"  allocation none published yet: enforcers hold quota / live enforcers (the "
                f"first waits for {2 * settings.allocation_span_ms} ms of usage); no directive "
                "for this quota"]
    out = [f"  allocation published at {format_ms(record['ts'])}, valid until "
           f"{format_ms(record['valid_until'])}; enforcers hold it per request (no directive: "
           "the throttle above is the cluster-wide window's, for reference):"]
    for e in record["enforcers"]:
        state = "saturated: shares the rest" if e["saturated"] else \
            f"unsaturated: usage x {allocation.HEADROOM:g}"
        trim = e.get("trim", 1.0)
        trimmed = "" if trim == 1.0 else f"; its bound is {trim:.0%} of its allocation (it " \
            "admitted more than that)"
        out.append(f"             enforcer {e['enforcer']}: {_num(e['limit'])} {unit} "
                   f"({e['limit'] / record['limit']:.0%}); used {_num(e['usage'])} {unit} over "
                   f"the last {settings.allocation_span_ms} ms, {state}{trimmed}")
    out.append(f"             other enforcers: {_num(record['others'])} {unit} (the floor, "
               f"{allocation.FLOOR_SHARE:.0%} of the quota)")
    out.append(f"  rule       floor {allocation.FLOOR_SHARE:.0%} each; an enforcer using under "
               f"{allocation.SATURATED:.0%} of its allocation, and more than one of its mean "
               f"requests short of it, and throttling none of its clients, gets its usage x "
               f"{allocation.HEADROOM:g}; the saturated split the rest equally, plus up to "
               f"{allocation.LEND:.0%} of the quota lent from what the unsaturated do not use; "
               f"none falls below what its window holds (brokers' "
               f"{settings.enforcer_window_ms} ms, named gateways' "
               f"{settings.window_num * settings.allocation_sample_ms} ms) over that window "
               f"and the time since; published on a move over "
               f"{allocation.THRESHOLD:.0%} of the quota, or every "
               f"{settings.allocation_validity_ms // 2} ms")
    return out


def _after_adjustment(snap: Snapshot, quota: str) -> str:
    event = snap.event
    if event is None:
        return ""
    if quota == cfg.FETCH and snap.event_throttled:
        return f"the throttled fetch's {event.bytes:,} bytes were taken back (empty response)"
    if quota == cfg.REQUEST and getattr(event, "network_ms", 0):
        pct = round(event.network_ms * 1_000_000) * NANOS_TO_PERCENT
        return f"network time {pct:g}% was recorded after the check, as Kafka does"
    if quota in (cfg.IP_RATE, cfg.BROKER_RATE) and snap.event_throttled:
        return "the closed connection was taken back out of the rate"
    return ""


def iter_quota_names() -> Iterator[str]:
    yield from (cfg.PRODUCE, cfg.FETCH, cfg.REQUEST, cfg.MUTATION, cfg.IP_RATE, cfg.BROKER_RATE)
