"""An entity's page, as one worker knows it: its windows, their explanation (the text
`quota-streams explain` prints, from the live window instead of a replay), the configs in force
with where they come from, and the charted history."""

from __future__ import annotations

from typing import Any

from app.console.index import ConsoleIndex, check_broker
from app.console.query import StateOf, window_row
from app.engine.configs import REQUEST, QuotaConfigs
from app.engine.engine import Decision, EngineSettings
from app.engine.kafka_math import UNLIMITED, bounded_throttle_time_ms, throttle_time_ms
from app.engine.stats import Rate
from app.explanation import Explanation, Snapshot, window_text

def as_decision(check: Any, settings: EngineSettings) -> Decision:
    """A live window's latest check as the decision it made (a `Window` keeps the rate its
    check measured and the window it was measured over; its throttle follows from them, capped
    at one sample for request time as ClientRequestQuotaManager caps it)."""
    if type(check) is Decision:
        return check
    rate: Rate = check.rate
    window_ms = rate.window or settings.window_num * check.w
    throttle = 0
    if check.limit < UNLIMITED and check.observed > check.limit:
        throttle = (bounded_throttle_time_ms(check.observed, check.limit, window_ms, check.w)
                    if check.quota == REQUEST else
                    throttle_time_ms(check.observed, check.limit, window_ms))
    return Decision(check.quota, check.entity, throttle, "throttle" if throttle else "none",
                    check.observed, check.limit, window_ms, check.level, check.key,
                    rate.clock, check_broker(check))


def entity_windows(index: ConsoleIndex, ident: str, state_of: StateOf, configs: QuotaConfigs,
                   settings: EngineSettings, now_ms: int, worker: str) -> list[dict[str, Any]]:
    """Every window this worker holds of the entity whose key is `ident`, with its
    explanation and history."""
    out = []
    now_s = now_ms // 1000
    for partition, key, check in index.items():
        if index.entity_id(key, check) != ident:
            continue
        entity = check.entity
        label = index.label(key, check)
        index.history.pin(key, now_s)
        row = window_row(index, partition, key, check, state_of, now_ms, worker)
        state = state_of(partition, key)
        decision = as_decision(check, settings)
        wkey = (check.quota, decision.broker, label)
        x = Explanation(dict(entity), now_ms, "live")
        published = index.in_force(check.quota, label, now_ms)
        allocated = published is not None and published.get("kind") == "allocation"
        precedence = configs.resolution_view(check.quota, check.entity)
        x.windows[wkey] = Snapshot(
            decision, None, state, None if allocated else published,
            decision.throttle_time_ms > 0, precedence, published if allocated else None)
        x.state_at[wkey] = state
        row["explanation"] = "\n".join(window_text(x, wkey, settings, at_label="now"))
        row["precedence"] = [{"level": level, "value": value} for level, value in precedence]
        series = index.history.series.get(key)
        row["history"] = None if series is None else series.points(now_s)
        marks = index.marks.get((check.quota, label))
        row["throttles"] = [] if marks is None else [list(m) for m in marks]
        out.append(row)
    return out
