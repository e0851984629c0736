"""Where the ingest sends an event: `QuotaEngine.route_keys` as partitions, cached per principal.

Resolving every quota type of every event against the configs was the ingest's largest
per-event cost, yet the answer depends only on the event's kind, broker, principal and API and
on the configs in force at the event's time: it is computed once per principal and kept while
events fall in the same stretch of the config timeline.
"""

from __future__ import annotations

import zlib
from typing import Any

from app.engine.engine import QuotaEngine
from app.engine.events import ConnectionEvent, Event, RequestEvent

Route = list[tuple[int, tuple[str, ...] | None]]

#: Bound on cached principals; beyond it the cache starts afresh (as the engine's does).
MAX_CACHED = 1_000_000


def partition_for(route_key: str, partitions: int) -> int:
    """crc32 of the route key: stable across processes and Python versions (unlike hash())."""
    return zlib.crc32(route_key.encode()) % partitions


class Router:
    """[(samples partition, quotas to process there or None for all)] for an event."""

    def __init__(self, engine: QuotaEngine, partitions: int) -> None:
        self.engine = engine
        self.partitions = partitions
        #: request routes by (broker, user, client id, api), the hot path; others by kind too
        self.requests: dict[tuple[int, str, str, str], Route] = {}
        self._others: dict[tuple[Any, ...], Route] = {}
        self._snapshot: tuple[int, int, int] = (-1, -1, -1)  # configs the cached routes are for

    def routes(self, event: Event, arrival: int) -> Route:
        """Under the configs in force for the event (`arrival`: its record's Kafka timestamp)."""
        snapshot = self.engine.timeline.at(event.ts, arrival).id
        if snapshot != self._snapshot or len(self.requests) + len(self._others) > MAX_CACHED:
            self.requests.clear()
            self._others.clear()
            self._snapshot = snapshot
        if type(event) is RequestEvent:
            key: tuple[Any, ...] = (event.broker, event.user, event.client_id, event.api)
            cache: dict[Any, Route] = self.requests
        elif isinstance(event, ConnectionEvent):
            key, cache = (ConnectionEvent, event.broker), self._others
        else:
            key, cache = (type(event), event.broker, event.user, event.client_id, event.api), self._others
        route = cache.get(key)
        if route is None:
            route = cache[key] = self.compute(event, arrival)
        return route

    def compute(self, event: Event, arrival: int) -> Route:
        return [(partition_for(k, self.partitions), only)
                for k, only in self.engine.route_keys(event, arrival)]
