"""Small pieces the audit, the report and `explain` share: times, entity candidates, nice numbers.

Pure Python (no pyspark), so the command-line parsing and the unit tests need no JVM.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Mapping

from app.contract.entities import entity_string


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
