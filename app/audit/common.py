"""Small pieces the audit, the report and `explain` share: times, entity names, nice numbers.

Pure Python (no pyspark), so the command-line parsing and the unit tests need no JVM.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any, Mapping

#: Order of the keys in an entity string; the same order the engine builds entity dicts in.
ENTITY_KEYS = ("user", "client_id", "ip", "broker", "listener")


def parse_when(raw: str) -> int:
    """A time as epoch milliseconds: an integer (epoch ms) or an ISO-8601 date/time.

    ISO times without a zone are UTC (event times are UTC epoch ms). Raises ValueError with a
    message that says what is accepted.
    """
    text = raw.strip()
    if not text:
        raise ValueError("empty time")
    if text.lstrip("-").isdigit():
        value = int(text)
        if value < 0:
            raise ValueError(f"{raw!r}: epoch milliseconds must be >= 0")
        return value
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        moment = _dt.datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(
            f"{raw!r} is neither epoch milliseconds nor an ISO-8601 time "
            "(e.g. 1763800000000 or 2025-11-22T08:26:40Z)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return int(round(moment.timestamp() * 1000))


def format_ms(ts: int | None) -> str:
    """Epoch ms as `2025-11-22T08:26:40.123Z` (UTC), for humans."""
    if ts is None:
        return "-"
    moment = _dt.datetime.fromtimestamp(ts / 1000, tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts % 1000:03d}Z"


def entity_string(entity: Mapping[str, Any]) -> str:
    """Canonical `k=v,k=v` name of a quota entity (empty and missing parts left out).

    {"user": "alice", "client_id": ""} -> "user=alice" (a user-level window);
    {"user": "", "client_id": "app"} -> "client_id=app"; {"broker": 1, "listener": "EXT"} ->
    "broker=1,listener=EXT". The engine's entity dicts and the directives' `entity` field both
    map to one string, so the audit can group and join on it.
    """
    parts = []
    for key in ENTITY_KEYS:
        value = entity.get(key)
        if value is None or value == "":
            continue
        parts.append(f"{key}={value}")
    return ",".join(parts)


def parse_entity(raw: str) -> dict[str, str]:
    """`user=alice,client_id=app` -> {"user": "alice", "client_id": "app"}; ValueError if bad."""
    entity: dict[str, str] = {}
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in ENTITY_KEYS:
            raise ValueError(
                f"{raw!r}: expected k=v pairs with keys from {', '.join(ENTITY_KEYS)} "
                "(e.g. user=alice,client_id=app)"
            )
        if key in entity:
            raise ValueError(f"{raw!r}: {key} given twice")
        entity[key] = value.strip()
    if not entity:
        raise ValueError("empty entity (e.g. user=alice,client_id=app)")
    return entity


def entity_candidates(spec: Mapping[str, str]) -> list[str]:
    """Entity strings of the windows a principal (or entity) given on the command line may use.

    `user=alice,client_id=app` may be throttled through a user+client window, a user window
    (all of alice's clients share it) or a client-id window (all users of `app`); the audit's
    tables are keyed by that resolved entity, so a lookup tries all three, most specific first.
    """
    exact = entity_string(spec)
    out = [exact]
    user, client = spec.get("user"), spec.get("client_id")
    if user and client:
        out += [entity_string({"user": user}), entity_string({"client_id": client})]
    if "broker" in spec and "listener" in spec:
        out.append(entity_string({"broker": spec["broker"]}))
    return out


def nice_ceil(value: float, digits: int = 2) -> float:
    """Round up to `digits` significant digits: 1_234_567 -> 1_300_000, 0.0123 -> 0.013."""
    if value <= 0 or not math.isfinite(value):
        return value
    exponent = math.floor(math.log10(value)) - (digits - 1)
    step = 10.0 ** exponent
    rounded = math.ceil(value / step - 1e-9) * step
    return float(f"{rounded:.{digits}g}") if rounded < 1e15 else rounded
