"""The overview's query: filter, sort and page the windows of every worker.

Each worker answers for the windows it holds with its first `offset + limit` rows in the
query's order (`select`); the worker that serves the page merges those lists (`merge`), so a
page is exact whichever worker serves it and no worker sends more than one page's depth.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.console.index import (
    ConsoleIndex,
    check_broker,
    check_level,
    check_time,
    limit_or_none,
    usage,
)
from app.engine.engine import DEBT_CODE, SEP, SHARES_CODE

SORTS = ("utilization", "observed", "limit", "checked", "entity", "quota")
#: rows a page holds at most, and how deep paging goes (narrow the filter beyond it)
MAX_PAGE, MAX_DEPTH = 200, 10_000

#: (partition, state key) -> the window's state (or one of its companions, by key), or None
StateOf = Callable[[int, str], Any]


class QueryError(ValueError):
    """A query parameter the overview cannot use (one line for the page)."""


@dataclass(frozen=True)
class Query:
    sort: str = "utilization"
    desc: bool = True
    text: str = ""
    quota: str = ""
    throttled: bool = False
    offset: int = 0
    limit: int = 50

    @property
    def depth(self) -> int:
        return self.offset + self.limit

    def params(self) -> dict[str, str]:
        """The query as URL parameters (what a worker forwards to the others)."""
        return {"sort": self.sort, "desc": "1" if self.desc else "0", "q": self.text,
                "quota": self.quota, "throttled": "1" if self.throttled else "0",
                "offset": str(self.offset), "limit": str(self.limit)}


def parse_query(params: Mapping[str, str]) -> Query:
    sort = params.get("sort", "utilization")
    if sort not in SORTS:
        raise QueryError(f"sort must be one of {', '.join(SORTS)}")
    try:
        offset = int(params.get("offset", "0"))
        limit = int(params.get("limit", "50"))
    except ValueError:
        raise QueryError("offset and limit must be integers") from None
    if offset < 0 or not 1 <= limit <= MAX_PAGE:
        raise QueryError(f"offset must be >= 0 and limit 1-{MAX_PAGE}")
    if offset + limit > MAX_DEPTH:
        raise QueryError(f"pages go {MAX_DEPTH:,} rows deep: narrow the filter")
    text = params.get("q", "")
    if len(text) > 1000:
        raise QueryError("the filter is longer than 1000 characters")
    return Query(sort=sort, desc=params.get("desc", "1") != "0", text=text,
                 quota=params.get("quota", ""), throttled=params.get("throttled", "0") == "1",
                 offset=offset, limit=limit)


def order_key(sort: str, quota: str, label: str, observed: float | None, limit: float | None,
              utilization: float | None, checked: int, key: str) -> tuple[Any, ...]:
    """One row's place in the query's order (ties: entity, quota, window); what has no value
    sorts as the least."""
    primary: Any
    if sort == "utilization":
        primary = -math.inf if utilization is None else utilization
    elif sort == "observed":
        primary = -math.inf if observed is None else observed
    elif sort == "limit":
        primary = math.inf if limit is None else limit
    elif sort == "checked":
        primary = checked
    elif sort == "entity":
        primary = label
    else:
        primary = quota
    return (primary, label, quota, key)


def row_order(sort: str) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    def key(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return order_key(sort, row["quota"], row["label"], row["observed"], row["limit"],
                         row["utilization"], row["checked_ms"], row["key"])
    return key


def throttled_until(partition: int, key: str, state_of: StateOf, now_ms: int) -> int | None:
    """When the window's throttle ends, if it is throttled now: the last directive's end, or
    an allocated window's debt repaid (`QuotaEngine._allocated_throttle`)."""
    until = 0
    for companion in (key, DEBT_CODE + SEP + key):
        state = state_of(partition, companion)
        if state is not None:
            until = max(until, int(getattr(state, "until", 0)))
    return until if until > now_ms else None


def select(index: ConsoleIndex, query: Query, state_of: StateOf, now_ms: int,
           worker: str) -> tuple[int, list[dict[str, Any]]]:
    """(windows matching, the first `query.depth` rows in order) of this worker's windows."""
    text = query.text.lower()
    sort = query.sort

    def matching() -> Iterable[tuple[tuple[Any, ...], int, str, Any]]:
        for partition, key, check in index.items():
            if query.quota and check.quota != query.quota:
                continue
            label = index.label(key, check)
            if text and text not in label.lower():
                continue
            if query.throttled and throttled_until(partition, key, state_of, now_ms) is None:
                continue
            observed, utilization = usage(check)
            yield (order_key(sort, check.quota, label, observed, limit_or_none(check.limit),
                             utilization, check_time(check), key),
                   partition, key, check)

    total = 0

    def counted() -> Iterable[tuple[tuple[Any, ...], int, str, Any]]:
        nonlocal total
        for item in matching():
            total += 1
            yield item

    pick = heapq.nlargest if query.desc else heapq.nsmallest
    top = pick(query.depth, counted(), key=lambda item: item[0])
    rows = [window_row(index, partition, key, check, state_of, now_ms, worker)
            for _, partition, key, check in top]
    return total, rows


def window_row(index: ConsoleIndex, partition: int, key: str, check: Any, state_of: StateOf,
               now_ms: int, worker: str) -> dict[str, Any]:
    """What the overview shows of one window."""
    label = index.label(key, check)
    limit = limit_or_none(check.limit)
    in_force = index.in_force(check.quota, label, now_ms)
    shares = state_of(partition, SHARES_CODE + SEP + key)
    observed, utilization = usage(check)
    return {
        "key": key, "quota": check.quota, "entity": check.entity, "label": label,
        "id": index.entity_id(key, check),
        "level": check_level(check), "limit": limit, "observed": observed,
        "tokens": check.observed if observed is None and limit is not None else None,
        "utilization": utilization,
        "checked_ms": check_time(check), "broker": check_broker(check),
        "throttled_until": throttled_until(partition, key, state_of, now_ms),
        "in_force": None if in_force is None else summary(in_force),
        "enforcers": [] if shares is None else list(shares.enforcers),
        "worker": worker,
    }


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """A published directive or allocation, as the overview lists it."""
    if record.get("kind") == "allocation":
        return {"kind": "allocation", "until": record["valid_until"],
                "enforcers": {str(e["enforcer"]): e["limit"] for e in record["enforcers"]}}
    return {"kind": "directive", "until": record["until"], "action": record["action"],
            "throttle_time_ms": record["throttle_time_ms"]}


def merge(pages: list[tuple[int, list[dict[str, Any]]]], query: Query
          ) -> tuple[int, list[dict[str, Any]]]:
    """Every worker's (total, first rows) into the page the query asks for."""
    total = sum(t for t, _ in pages)
    ordered = heapq.merge(*(rows for _, rows in pages), key=row_order(query.sort),
                          reverse=query.desc)
    rows = [row for i, row in zip(range(query.depth), ordered)][query.offset:]
    return total, rows
