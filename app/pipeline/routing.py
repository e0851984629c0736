"""Where the ingest sends an event: `QuotaEngine.route_keys` as partitions, cached per principal.

Resolving every quota type of every event against the configs was the ingest's largest
per-event cost, yet the answer depends only on the event's kind, broker, principal and API and
on the configs: it is computed once per principal and kept until the configs change.
"""

from __future__ import annotations

from typing import Any

from app.engine.engine import QuotaEngine
from app.engine.events import ConnectionEvent, Event
from app.pipeline.topology import partition_for

Route = list[tuple[int, tuple[str, ...] | None]]

#: Bound on cached principals; beyond it the cache starts afresh (as the engine's does).
MAX_CACHED = 1_000_000


class Router:
    """[(samples partition, quotas to process there or None for all)] for an event."""

    def __init__(self, engine: QuotaEngine, partitions: int) -> None:
        self.engine = engine
        self.partitions = partitions
        self._cache: dict[tuple[Any, ...], Route] = {}
        self._version = -1

    def routes(self, event: Event) -> Route:
        version = self.engine.configs.version
        if version != self._version or len(self._cache) > MAX_CACHED:
            self._cache.clear()
            self._version = version
        if type(event) is ConnectionEvent:
            key: tuple[Any, ...] = (ConnectionEvent, event.broker)
        else:
            key = (type(event), event.broker, event.user, event.client_id, event.api)  # type: ignore[union-attr]
        route = self._cache.get(key)
        if route is None:
            route = self._cache[key] = [(partition_for(k, self.partitions), only)
                                        for k, only in self.engine.route_keys(event)]
        return route
