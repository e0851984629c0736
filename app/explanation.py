"""The text that explains one window's decision: what `quota-streams explain` prints after its
replay, and what the console shows for a live window. Formatting only: an engine decision, the
window's state, the config levels Kafka checked and what was published, in, text out; nothing
here reads input, a clock or a setting of its own.
"""

from __future__ import annotations

import copy
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.contract.entities import entity_string
from app.engine import allocation
from app.engine import configs as cfg
from app.engine.engine import ALLOCATED, NANOS_TO_PERCENT, Decision, EngineSettings
from app.engine.events import MutationEvent, RequestEvent
from app.engine.kafka_math import INT_MAX_F, UNLIMITED
from app.engine.stats import Rate, TokenBucket


def format_ms(ts: int | None) -> str:
    """Epoch ms as `2025-11-22T08:26:40.123Z` (UTC), for humans."""
    if ts is None:
        return "-"
    moment = _dt.datetime.fromtimestamp(ts / 1000, tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts % 1000:03d}Z"


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
