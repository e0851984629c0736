"""The allocation record (contract v1, docs/allocations.md): what a valid one is.

Workers publish, per cluster-scope window, the limit each enforcer holds; an enforcer obeys only
an allocation `parse_allocation` accepts, and refuses the others with `BadDirective` and a
countable reason, as it refuses a bad directive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from app.contract.directives import BadDirective
from app.engine.allocation import LEND, MAX_ENFORCERS, MAX_VALIDITY_MS, TRIM_MAX, TRIM_MIN
from app.engine.engine import ALLOCATED


#: the largest limit a quota config may hold (contract: amounts up to 10^15)
MAX_LIMIT = 1e15


@dataclass(frozen=True, slots=True)
class Allocation:
    """One validated allocation record."""

    quota: str
    user: str
    client_id: str
    ts: int
    valid_until: int
    limit: float
    others: float
    #: each listed enforcer's bound: its allocation x its trim
    enforcers: Mapping[int, float]

    def limit_for(self, enforcer: int) -> float:
        """This enforcer's bound: its own, or the floor of those the allocation does not list."""
        return self.enforcers.get(enforcer, self.others)


def _int(d: Mapping[str, Any], name: str) -> int:
    value = d.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadDirective("wrong_type", f"{name} must be a non-negative integer")
    return value


def _amount(d: Mapping[str, Any], name: str, most: float) -> float:
    value = d.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadDirective("wrong_type", f"{name} must be a number")
    if not math.isfinite(value) or value < 0 or value > most:
        raise BadDirective("out_of_range", f"{name} must be within [0, {most:g}]")
    return float(value)


def parse_allocation(record: Any) -> Allocation:
    """Validate a decoded allocation record; raise `BadDirective` when it is unusable."""
    if not isinstance(record, Mapping) or record.get("kind") != "allocation":
        raise BadDirective("not_an_allocation")
    if record.get("v") != 1 or isinstance(record.get("v"), bool):
        raise BadDirective("wrong_version", repr(record.get("v")))
    quota = record.get("quota")
    if quota not in ALLOCATED:
        raise BadDirective("bad_quota", repr(quota)[:64])
    entity = record.get("entity")
    if not isinstance(entity, Mapping):
        raise BadDirective("bad_entity", "entity must be an object")
    parts = []
    for name in ("user", "client_id"):
        value = entity.get(name, "")
        if not isinstance(value, str) or len(value) > 1024:
            raise BadDirective("bad_entity", f"entity.{name} must be a string")
        parts.append(value)
    ts, valid_until = _int(record, "ts"), _int(record, "valid_until")
    if not ts < valid_until <= ts + MAX_VALIDITY_MS:
        raise BadDirective("bad_validity", f"valid_until must be within (ts, ts + {MAX_VALIDITY_MS}]")
    limit = _amount(record, "limit", MAX_LIMIT)
    others = _amount(record, "others", limit)
    rows = record.get("enforcers")
    if not isinstance(rows, list) or len(rows) > MAX_ENFORCERS:
        raise BadDirective("bad_enforcers", f"enforcers must be a list of at most {MAX_ENFORCERS}")
    allocated: dict[int, float] = {}
    bounds: dict[int, float] = {}
    for row in rows:
        if not isinstance(row, Mapping):
            raise BadDirective("bad_enforcers", "an enforcer entry must be an object")
        enforcer, share = _int(row, "enforcer"), _amount(row, "limit", limit)
        trim = _trim(row)
        allocated[enforcer], bounds[enforcer] = share, share * trim
    if sum(allocated.values()) > limit * (1 + LEND + 1e-9):
        raise BadDirective("over_quota", f"the enforcers' limits add up to more than "
                           f"{1 + LEND:g} x the quota")
    return Allocation(quota, parts[0], parts[1], ts, valid_until, limit, others, bounds)


def _trim(row: Mapping[str, Any]) -> float:
    """An enforcer's trim (`app.engine.allocation.trimmed`): 1 when the record has none."""
    if "trim" not in row:
        return 1.0
    value = row["trim"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not \
            TRIM_MIN <= value <= TRIM_MAX:
        raise BadDirective("out_of_range", f"trim must be within [{TRIM_MIN}, {TRIM_MAX}]")
    return float(value)
