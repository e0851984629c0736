"""Route keys: which partition holds every window an event touches, and a cache of them.

A route key names the entity a principal's windows resolve to under the configs in force
(`QuotaEngine.resolved_entities`): the user when the resolved entity has one, else the client
id, prefixed by the broker in broker scope; connection windows live per broker (all together
in cluster scope: connection rates are small). Its `text` is what is hashed to a partition, so
every driver partitions alike: the live ingest, the audit's step 1, `explain`.

When one request's quota types resolve to different keys (a user quota for bytes, a client-id
quota for request time), it has one route per key, each with the quota types to process there.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from app.engine.batch import RequestColumns
from app.engine.configs import MAX_RESOLVED
from app.engine.engine import ALL_QUOTAS, QuotaEngine, quota_mask
from app.engine.events import ConnectionEvent, Event, MutationEvent
from app.engine.timeline import ConfigTimeline, Snapshot

USER = "u"
CLIENT = "c"
CONNECTIONS = "connections"
#: Bound on cached principals; beyond it the cache starts afresh (as the engine's does).
MAX_CACHED = MAX_RESOLVED


class RouteKey(NamedTuple):
    """`broker`: -1 in cluster scope; `kind`: USER, CLIENT or CONNECTIONS; `name`: the
    resolved user or client id ("" for connections)."""

    broker: int
    kind: str
    name: str

    @property
    def text(self) -> str:
        """The key as hashed to a partition (`b1:u:alice`, `c:app`, `connections`)."""
        body = CONNECTIONS if self.kind == CONNECTIONS else f"{self.kind}:{self.name}"
        return body if self.broker < 0 else f"b{self.broker}:{body}"

    @property
    def entity(self) -> RouteKey:
        """The same key on no particular broker: what a tool that asks for an entity means."""
        return RouteKey(-1, self.kind, self.name)


T = TypeVar("T")

#: (route key, the quota types to process there: `engine.PRODUCE_BIT`...)
Routes = list[tuple[RouteKey, int]]
#: (samples partition, quota types) per route
Route = list[tuple[int, int]]


def partition_for(key: RouteKey, partitions: int) -> int:
    return text_partition(key.text, partitions)


def text_partition(text: str, partitions: int) -> int:
    """crc32 of a key's text: stable across processes and Python versions (unlike hash())."""
    return zlib.crc32(text.encode()) % partitions


def route_keys(engine: QuotaEngine, event: Event, arrival: int) -> Routes:
    """Every route key of an event under the configs in force for it (`arrival`: its source
    record's Kafka timestamp), with the quota types each one takes."""
    broker = -1 if engine.cluster else event.broker
    if isinstance(event, ConnectionEvent):
        return [(RouteKey(broker, CONNECTIONS, ""), ALL_QUOTAS)]
    api = "" if isinstance(event, MutationEvent) else event.api
    return principal_keys(engine, broker, isinstance(event, MutationEvent), event.user,
                          event.client_id, api, event.ts, arrival)


def principal_keys(engine: QuotaEngine, broker: int, mutation: bool, user: str, client_id: str,
                   api: str, ts: int, arrival: int) -> Routes:
    groups: dict[RouteKey, list[str]] = {}
    for quota, res_user, res_client in engine.resolved_entities(mutation, user, client_id, api,
                                                                ts, arrival):
        key = (RouteKey(broker, USER, res_user) if res_user
               else RouteKey(broker, CLIENT, res_client))
        groups.setdefault(key, []).append(quota)
    if len(groups) <= 1:
        return [(next(iter(groups), RouteKey(broker, USER, user)), ALL_QUOTAS)]
    return [(key, quota_mask(tuple(quotas))) for key, quotas in groups.items()]


class ConfigScoped:
    """Values derived from the configs, by key, kept while the configs in force stay the same
    (and at most MAX_CACHED of them): what routes are, for every driver that caches them."""

    def __init__(self, timeline: ConfigTimeline) -> None:
        self.timeline = timeline
        self._values: dict[Any, Any] = {}
        self._snapshot: tuple[int, int, int] = (-1, -1, -1)  # the configs the values are for
        #: bumped whenever the values are forgotten (a cache built on them follows it)
        self.generation = 0

    def at(self, ts: int, arrival: int) -> Snapshot:
        """For what comes next: a sample at `ts` whose record arrived at `arrival`; returns
        the configs in force for it (a caller may reuse its stretch of the timeline)."""
        found = self.timeline.at(ts, arrival)
        if found.id != self._snapshot:
            self._snapshot = found.id
            self._forget()
        return found

    def get(self, key: Any) -> Any:
        return self._values.get(key)

    def put(self, key: Any, value: Any) -> Any:
        if len(self._values) >= MAX_CACHED:
            self._forget()
        self._values[key] = value
        return value

    def _forget(self) -> None:
        self._values.clear()
        self.generation += 1


def principal_values(cache: ConfigScoped, batch: RequestColumns,
                     resolve: Callable[[RequestColumns, int], Any]) -> list[Any]:
    """Each row's value for its principal: `resolve(batch, row)` for the first row of a
    principal (API, broker, user, client id), kept in `cache` while the configs in force stay
    the same and reused for the principal's other rows.

    Why: what routing derives from the configs depends only on the principal and the
    configs, and resolving it was a driver's largest per-sample cost. Within a batch a
    principal is found by one integer of its name indices (where a tuple would be built and
    hashed per row), and the configs are looked up again only when a row leaves the stretch
    of the timeline they are in force for.
    """
    n = len(batch)
    values: list[Any] = [None] * n
    ts, arrival = batch.ts, batch.arrival
    broker, user, client_id, api = batch.broker, batch.user, batch.client_id, batch.api
    names = batch.names
    size = len(names)
    local: dict[int, dict[int, Any]] = {}  # by broker, then by the principal's integer
    t0 = t1 = a0 = a1 = 0  # the stretch of the timeline the cached values are good for
    generation = cache.generation
    for i in range(n):
        t, a = ts[i], arrival[i]
        if t < t0 or t >= t1 or a < a0 or a >= a1:  # the configs may differ: look again
            stretch = cache.at(t, a)
            t0, t1, a0, a1 = stretch.t0, stretch.t1, stretch.a0, stretch.a1
            if cache.generation != generation:
                local.clear()
                generation = cache.generation
        on = local.get(broker[i])
        if on is None:
            on = local[broker[i]] = {}
        pk = (user[i] * size + client_id[i]) * size + api[i]
        value = on.get(pk)
        if value is None:
            key = (2, broker[i], names[user[i]], names[client_id[i]], names[api[i]])
            value = cache.get(key)
            if value is None:
                value = cache.put(key, resolve(batch, i))
            on[pk] = value
        values[i] = value
    return values


class RouteCache(Generic[T]):
    """Every driver's router: where a sample's windows live, in the form the driver needs
    (`place` of its route keys), cached per principal while the configs stay the same.

    Resolving every quota type against the configs was the ingest's largest per-sample cost,
    yet the answer depends only on the principal (kind, broker, user, client id, API) and on
    the configs in force: it is computed once per principal and kept while samples fall in the
    same stretch of the config timeline. The worker places routes as samples partitions
    (`Router`), the audit's step 1 as route key texts (`app.audit.recompute`).
    """

    def __init__(self, engine: QuotaEngine, place: Callable[[Routes], T]) -> None:
        self.engine = engine
        self.place = place
        self._cache = ConfigScoped(engine.timeline)

    def routes(self, event: Event, arrival: int) -> T:
        """Where an event goes (connections and mutations: requests come as columns)."""
        self._cache.at(event.ts, arrival)
        if isinstance(event, ConnectionEvent):
            key = (0, event.broker, "", "", "")
        elif isinstance(event, MutationEvent):
            key = (1, event.broker, event.user, event.client_id, "")
        else:
            key = (2, event.broker, event.user, event.client_id, event.api)
        found: T | None = self._cache.get(key)
        if found is None:
            found = self._cache.put(key, self.place(route_keys(self.engine, event, arrival)))
        return found

    def request_route(self, batch: RequestColumns, i: int) -> T:
        """Where request row `i` goes, for a caller that takes rows one at a time."""
        names = batch.names
        self._cache.at(batch.ts[i], batch.arrival[i])
        key = (2, batch.broker[i], names[batch.user[i]], names[batch.client_id[i]],
               names[batch.api[i]])
        found: T | None = self._cache.get(key)
        if found is None:
            found = self._cache.put(key, self._resolve(batch, i))
        return found

    def request_routes(self, batch: RequestColumns) -> list[T]:
        """Where each row of a batch goes (`principal_values`)."""
        return principal_values(self._cache, batch, self._resolve)

    def _resolve(self, batch: RequestColumns, i: int) -> T:
        names = batch.names
        engine = self.engine
        return self.place(principal_keys(
            engine, -1 if engine.cluster else batch.broker[i], False, names[batch.user[i]],
            names[batch.client_id[i]], names[batch.api[i]], batch.ts[i], batch.arrival[i]))


class Router(RouteCache[Route]):
    """The worker's ingest router: routes as samples partitions, and request rows split into
    one outbox per partition."""

    def __init__(self, engine: QuotaEngine, partitions: int) -> None:
        super().__init__(engine, self._partitions)
        self.partitions = partitions

    def _partitions(self, keys: Routes) -> Route:
        return [(partition_for(k, self.partitions), only) for k, only in keys]

    def split(self, batch: RequestColumns, outboxes: dict[int, RequestColumns]) -> None:
        """Append each row of a validated batch to the outbox of every partition it routes
        to, in order. Rows of one principal share their route within a batch; the rows bound
        for a partition are then copied column by column."""
        n = len(batch)
        if not n:
            return
        routes = self.request_routes(batch)
        rows: dict[int, list[int]] = {}
        #: per partition, each row's quota types (only where some row of it was split)
        onlys: dict[int, list[int]] = {}
        for i in range(n):
            route: Route = routes[i]
            for partition, only in route:
                mine = rows.get(partition)
                if mine is None:
                    mine = rows[partition] = []
                mask = onlys.get(partition)
                if only != ALL_QUOTAS and mask is None:
                    mask = onlys[partition] = [0] * len(mine)
                mine.append(i)
                if mask is not None:
                    mask.append(0 if only == ALL_QUOTAS else only)
        for partition, mine in rows.items():
            out = outboxes.get(partition)
            if out is None:
                out = outboxes[partition] = RequestColumns()
            out.extend_rows(batch, mine, onlys.get(partition))
