"""The quota engine: Kafka's quota managers over event time, for every driver.

`QuotaEngine.process(event)` records one event the way the broker's quota managers would
(ClientQuotaManager, ClientRequestQuotaManager, ControllerMutationQuotaManager, ConnectionQuotas)
and returns the per-quota decisions Kafka would have made for it, plus the directives to publish.
`QuotaEngine.process_requests(columns)` does the same for a batch of request samples, row by row
(`app.engine.batch`: the worker's aggregate, `replay` and the audit send request samples that
way). Every driver calls these, so they agree.

Time rule: time comes only from event timestamps. Within one piece of state (one window or
bucket), an event older than the latest one that state has seen is processed at that latest
time (a monotonic clamp), so results depend only on the order of the input, never on a clock.

Config rule: an event at time `t` is routed and judged by the quota configs with `ts <= t`
that had reached Kafka by the event's arrival plus half the grace (`app.engine.timeline`),
whichever order configs and events reach the engine in.

Directive rule: a throttle decision publishes a directive when no directive of that state is
active at the event's time, or when it moves the active `until` later by more than
`min_extension_ms` (default one tenth of a window). Throttles that end sooner than the active
one publish nothing: the broker already holds the entity until the later `until`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, MutableMapping, Protocol, Union

from app.engine import configs as cfg
from app.engine import allocation
from app.engine.allocation import Horizon, Shares
from app.engine.batch import RequestColumns
from app.engine.configs import ConfigUpdate, QuotaConfigs
from app.engine.events import ConnectionEvent, Event, MutationEvent, RequestEvent
from app.engine.timeline import FOREVER, ConfigTimeline, Snapshot
from app.engine.kafka_math import (
    INT_MAX,
    UNLIMITED,
    bounded_throttle_time_ms,
    round_half_even,
    saturate_int,
    throttle_time_ms,
    token_throttle_time_ms,
)
from app.engine.pickling import by_constructor
from app.engine.stats import Rate, TokenBucket, burst, idle

State = Union[Rate, TokenBucket, Shares]
SEP: Final = "\x1f"
# state-key prefixes, one per kind of window
KEY_CODE: Final = {cfg.PRODUCE: "P", cfg.FETCH: "F", cfg.REQUEST: "R", cfg.MUTATION: "M"}
#: prefix of a cluster window's per-broker usage (`Shares`), before the window's own key
SHARES_CODE: Final = "A"
#: prefix of an allocated window's debt (`TokenBucket`), before the window's own key
DEBT_CODE: Final = "D"
#: the quotas allocations divide (rates: the mutation bucket and connection rates keep directives)
ALLOCATED: Final = frozenset({cfg.PRODUCE, cfg.FETCH, cfg.REQUEST})
NANOS_TO_PERCENT: Final = 100.0 / 1e9  # ClientRequestQuotaManager.NanosToPercentagePerSecond
#: a request row's quota types to process (`RequestColumns.only`; 0 there means all of them)
PRODUCE_BIT: Final = 1
FETCH_BIT: Final = 2
REQUEST_BIT: Final = 4
ALL_QUOTAS: Final = PRODUCE_BIT | FETCH_BIT | REQUEST_BIT
QUOTA_BITS: Final = {cfg.PRODUCE: PRODUCE_BIT, cfg.FETCH: FETCH_BIT, cfg.REQUEST: REQUEST_BIT}


def quota_mask(quotas: tuple[str, ...] | None) -> int:
    """The `only` bits of some client quota types (None: all)."""
    if quotas is None:
        return ALL_QUOTAS
    mask = 0
    for quota in quotas:
        mask |= QUOTA_BITS[quota]
    return mask


def client_quotas(mutation: bool, api: str) -> tuple[str, ...]:
    """The client quota types a request with this API (or a controller mutation) counts on."""
    if mutation:
        return (cfg.MUTATION,)
    if api == "Produce":
        return (cfg.PRODUCE, cfg.REQUEST)
    if api == "Fetch":
        return (cfg.FETCH, cfg.REQUEST)
    return (cfg.REQUEST,)


def nanos(ms: float) -> int:
    """A request time in ms as the whole nanoseconds the request quota counts (the contract's
    conversion; `RequestColumns` carries times in these units)."""
    return round_half_even(ms * 1_000_000)


@dataclass(frozen=True)
class EngineSettings:
    """Window settings (Kafka's quota.window.* and controller.quota.window.*) and scope."""

    scope: str = "broker"
    #: "kafka": Kafka's synchronous take-backs (a throttled fetch's bytes, an IP-throttled
    #: connection, a strict mutation in debt are not counted; IP and connection delays capped at
    #: one window). "served": events report usage brokers already served, so all of it counts
    #: and connection throttles last until the rate is back under the limit.
    accounting: str = "kafka"
    window_num: int = 11
    window_ms: int = 1000
    controller_window_num: int = 11
    controller_window_ms: int = 1000
    min_extension_ms: int | None = None
    #: how late after its `ts` a config record may reach Kafka and still take effect at its
    #: `ts` (half of it; the other half covers clocks): `app.engine.timeline`
    config_grace_ms: int = 20
    #: a window with no event for longer than this (event time; 0: never) starts afresh, as
    #: Kafka drops a quota sensor inactive for an hour; idle windows may then be dropped
    #: (`QuotaEngine.expire`) without changing any decision
    idle_expiry_ms: int = 3_600_000
    #: cluster scope only: divide client quotas (bytes in and out, request time) among the
    #: enforcers (named gateways, else brokers: `RequestEvent.enforcer`) by usage and publish
    #: each one's limit (`app.engine.allocation`) instead of cluster-wide throttle directives;
    #: enforcers hold their limit per request
    allocations: bool = False
    #: how long an enforcer keeps an allocation when no newer one arrives (then: a static split)
    allocation_validity_ms: int = 5000
    #: the sample length (`window_ms`'s part) of the windows an enforcer holds its allocations
    #: over: an allocation moves, and Kafka's formula answers a limit that dropped under a full
    #: window with a throttle of up to (window/new limit) x what it holds; short samples keep
    #: that, and the bursts a greedy client makes each time a sample leaves, short too
    allocation_sample_ms: int = 100
    #: how long (event time) each enforcer's usage is measured over when a quota is divided
    #: (`app.engine.allocation`)
    allocation_span_ms: int = allocation.SPAN_MS
    #: the window brokers hold their allocations over (usage naming no gateway; Kafka's
    #: 11 x 1 s, as brokers running the broker plugin): no allocation falls faster than that
    #: window drains (`allocation.kept`). A named gateway's is its own allocated windows,
    #: `window_num` x `allocation_sample_ms`, which the workers share with it.
    enforcer_window_ms: int = allocation.WINDOW_MS

    def __post_init__(self) -> None:
        if self.scope not in ("broker", "cluster"):
            raise ValueError("scope must be 'broker' or 'cluster'")
        if self.accounting not in ("kafka", "served"):
            raise ValueError("accounting must be 'kafka' or 'served'")
        for name in ("window_num", "window_ms", "controller_window_num", "controller_window_ms",
                     "allocation_sample_ms", "allocation_span_ms", "enforcer_window_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.config_grace_ms < 0:
            raise ValueError("config_grace_ms must be >= 0")
        if self.idle_expiry_ms < 0:
            raise ValueError("idle_expiry_ms must be >= 0")
        if self.allocations and self.scope != "cluster":
            raise ValueError("allocations need cluster scope")
        if self.allocation_validity_ms < allocation.MIN_VALIDITY_MS:
            raise ValueError(f"allocation_validity_ms must be >= {allocation.MIN_VALIDITY_MS}")

    @property
    def sweep_every_ms(self) -> int:
        """How often (event time) a driver drops idle windows: a sixth of the expiry."""
        return self.idle_expiry_ms // 6

    @property
    def extension_ms(self) -> int:
        return self.window_ms // 10 if self.min_extension_ms is None else self.min_extension_ms

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return by_constructor(self)


class Cadence:
    """When periodic work is due, by event time: every `every_ms` (0: never)."""

    __slots__ = ("every_ms", "next")

    def __init__(self, every_ms: int) -> None:
        self.every_ms = every_ms
        self.next = -1

    def due(self, now: int) -> bool:
        if not self.every_ms or now < self.next:
            return False
        self.next = now + self.every_ms
        return True


class Limits(Protocol):
    """Where an enforcer's windows take their limits from instead of the configs alone (the
    allocations of `app.subscriber.allocations`); `version` changes when any limit may have.
    An engine with limits holds its `ALLOCATED` windows keyed by the enforcer
    (`RequestEvent.enforcer`), over samples of `EngineSettings.allocation_sample_ms` with a
    debt as the throttle (`QuotaEngine._allocated_throttle`: a gateway's), or, with
    `kafka_formula`, over the engine's own windows with Kafka's formula: what a broker running
    the broker plugin does, Kafka's quota manager with the allocation as its bound."""

    @property
    def version(self) -> int: ...

    @property
    def kafka_formula(self) -> bool: ...

    def at(self, now: int) -> None:
        """Let limits whose validity ended by `now` (event time) go."""

    def limit(self, quota: str, user: str, client_id: str, enforcer: int, full: float) -> float: ...

    def split(self, full: float) -> float:
        """The static split of a quota `full`: its share on each live enforcer."""


class Window:
    """One window a principal uses: its quota, state key, the entity sharing it, limit, level.

    Resolved once per principal and cached until the configs change. It also remembers its
    state object and the store that holds it, which saves a store lookup per event while the
    engine works on that same store (see `QuotaEngine`).
    """

    __slots__ = ("quota", "key", "entity", "limit", "level", "w", "split", "rate", "store",
                 "drain", "shares", "debt", "observed", "sources")

    def __init__(self, quota: str, key: str, entity: dict[str, Any], limit: float,
                 level: str | None, w: int, split: float = 0.0) -> None:
        self.quota = quota
        self.key = key
        self.entity = entity
        self.limit = limit
        self.level = level
        self.w = w  # the sample length (ms) the window is measured over
        #: allocated windows only (0.0: not one): the quota's static split, which bounds a
        #: throttle (`_allocated_throttle`)
        self.split = split
        self.rate: Rate | None = None
        self.store: object = None
        #: the engine's drain count when this window's key was last added to `touched`
        self.drain = -1
        #: allocations only: the window's per-broker usage, kept while `store` is the same
        self.shares: Shares | None = None
        #: allocated windows only: what the enforcer admitted past its limit, kept as `shares`
        self.debt: TokenBucket | None = None
        #: the rate its last check measured (what the metrics' top entities show)
        self.observed = 0.0
        #: None, or the usage its checks recorded per broker (broker scope) or enforcer
        #: (cluster scope) since a driver last took the dict: set by a driver that charts the
        #: window per source (the console), read and replaced by it, never by the engine
        self.sources: dict[int, float] | None = None


class Decision:
    """What Kafka decided for one quota of one event, with its explanation."""

    __slots__ = ("quota", "entity", "throttle_time_ms", "action", "observed", "limit",
                 "window_ms", "config_level", "key", "ts", "broker")

    def __init__(self, quota: str, entity: dict[str, Any], throttle: int, action: str,
                 observed: float, limit: float, window_ms: int, level: str | None, key: str,
                 ts: int, broker: int | None) -> None:
        self.quota = quota
        self.entity = entity
        self.throttle_time_ms = throttle
        self.action = action
        self.observed = observed
        self.limit = limit
        self.window_ms = window_ms
        self.config_level = level
        self.key = key
        self.ts = ts
        self.broker = broker

    def as_dict(self) -> dict[str, Any]:
        return {
            "quota": self.quota, "entity": self.entity, "throttle_time_ms": self.throttle_time_ms,
            "action": self.action, "observed": self.observed, "limit": self.limit,
            "window_ms": self.window_ms, "config_level": self.config_level,
        }


class QuotaEngine:
    """Kafka's quota managers as a pure function of (configs, state, event) -> decisions.

    `store` maps state keys to `Rate`/`TokenBucket` objects; the replay uses a dict, the Faust
    worker a write-back cache over a RocksDB table per partition. States are changed in place,
    never replaced, so the engine keeps each window's state object for as long as `store` is
    the same object: a driver that restores or drops states assigns a new store (or calls
    `forget_states`). The keys touched since the last `drain_touched()` tell a driver what to
    persist; only `drain_touched()` empties that set, so a window adds its key once per drain.
    """

    def __init__(self, settings: EngineSettings | None = None, configs: QuotaConfigs | None = None,
                 store: MutableMapping[str, State] | None = None, limits: Limits | None = None
                 ) -> None:
        """`configs`: in force from the start of time (later ones: `process` or `add_config`);
        `limits`: an enforcer's per-window limits (None: the configs')."""
        self.settings = settings or EngineSettings()
        self.timeline = ConfigTimeline(configs, self.settings.config_grace_ms)
        self.store: MutableMapping[str, State] = {} if store is None else store
        self.touched: set[str] = set()
        self._drains = 0
        self.cluster = self.settings.scope == "cluster"
        self.take_back = self.settings.accounting == "kafka"
        self.exempt_requests = 0
        #: whether the last Fetch throttled keeps its bytes, to be delivered, not emptied.
        #: Kafka empties a throttled fetch and takes its bytes back; against an allocated
        #: window (a second's worth of a share) one record batch is a large part of what it
        #: holds, and the client would then sit out a throttle for room it never used.
        #: Delivered and charged, as a Produce is, its overshoot is what its throttle pays
        #: back; and one larger than the whole window, emptied, would be fetched again at the
        #: same size and never fit.
        self.kept_fetch = False
        s = self.settings
        self._n, self._w = s.window_num, s.window_ms
        self._aw = s.allocation_sample_ms
        self._span = s.allocation_span_ms
        #: what allocations are held over (`Horizon`): by brokers running the plugin, and by
        #: named gateways (their own allocated windows)
        self._brokers = Horizon(s.enforcer_window_ms, s.allocation_span_ms, broker=True)
        self._gateways = Horizon(s.window_num * s.allocation_sample_ms, s.allocation_span_ms,
                                 broker=False)
        #: the throttle the enforcer answered the request row being processed with (`_share`)
        self._row_throttle = 0
        #: whether the request row being processed was measured by a named gateway (`_share`)
        self._row_gateway = False
        self._cn, self._cw = s.controller_window_num, s.controller_window_ms
        self._ext = s.extension_ms
        self._idle = s.idle_expiry_ms
        self._sweeps = Cadence(s.sweep_every_ms)
        self._principals: dict[tuple[int, int, str, str], tuple[Window | None, ...]] = {}
        #: the windows `_principals` shares by state key: the principals of one entity (a
        #: user's client ids under a user quota) check one `Window`, so its `observed` is
        #: the window's latest check whichever principal made it
        self._windows: dict[str, Window] = {}
        #: the configs of the event being processed, and the snapshot `_principals` was built on
        self._configs: QuotaConfigs = self.timeline.at(0).configs
        self._snapshot_id: tuple[int, int, int] = (-1, -1, -1)
        self._throttled = False  # set by any decision with a throttle, so most events skip _emit
        self._allocate = s.allocations
        self._validity = s.allocation_validity_ms
        self._allocs: list[dict[str, Any]] = []  # allocations of the event being processed
        self.limits = limits
        self._limits_version = -1
        self._quiet = False  # `process_requests` without decisions: throttles only
        #: windows used since the last `drain_windows` (the metrics' latest per window)
        self.windows_used: dict[str, Window] = {}

    # -- public API ---------------------------------------------------------------------------

    @property
    def configs(self) -> QuotaConfigs:
        """The configs once every update known took effect (to read: changes go through
        `process` or `add_config`)."""
        return self.timeline.latest

    def add_config(self, update: ConfigUpdate, arrival: int | None = None) -> bool:
        """A config update whose record reached Kafka at `arrival` (None: from a file); True
        if it arrived late (in force from its arrival, not its `ts`)."""
        return self.timeline.add(update, arrival)

    def _configs_at(self, ts: int, arrival: int) -> None:
        """Judge the next event by the configs in force for it."""
        snapshot: Snapshot = self.timeline.at(ts, arrival)
        if snapshot.id != self._snapshot_id:
            self._snapshot_id = snapshot.id
            self._configs = snapshot.configs
            self._forget_windows()
        limits = self.limits
        if limits is None:
            return
        limits.at(ts)
        if limits.version != self._limits_version:
            self._limits_version = limits.version
            self._forget_windows()

    def process(self, event: Event | ConfigUpdate, arrival: int = FOREVER,
                only: int = ALL_QUOTAS) -> tuple[list[Decision], list[dict[str, Any]]]:
        """Apply one event; return its decisions (in Kafka's order) and directives to publish.

        `arrival`: the Kafka timestamp of the event's source record (default: after every
        config). A config update (from a file: no arrival) takes effect at its own `ts`.
        `only`: a request's quota types to process (`PRODUCE_BIT`...: a split request's share
        on one route, `app.intake.routes`).
        """
        decisions: list[Decision] = []
        if isinstance(event, ConfigUpdate):
            self.timeline.add(event)
            return decisions, []
        self._configs_at(event.ts, arrival)
        self._throttled = False
        if type(event) is RequestEvent:
            self._request_event(event, only, decisions)
        elif isinstance(event, ConnectionEvent):
            self._connection(event, decisions)
        elif isinstance(event, MutationEvent):
            self._mutation(event, decisions)
        return decisions, self._directives(decisions)

    def _directives(self, decisions: list[Decision]) -> list[dict[str, Any]]:
        """Directives (the directive rule) and allocations to publish for one event's decisions.
        With allocations, client quotas publish no throttle directive: brokers enforce their
        allocation themselves."""
        allocs = self._allocs
        if allocs:
            self._allocs = []
        if not self._throttled:
            return allocs
        out = [self._directive(d) for d in decisions
               if d.throttle_time_ms > 0 and not (self._allocate and d.quota in ALLOCATED)
               and self._emit(d)]
        return out + allocs if allocs else out

    def forget_states(self) -> None:
        """Drop every reference the engine keeps to state objects (and so to their stores)."""
        self._forget_windows()

    def _forget_windows(self) -> None:
        self._principals.clear()
        self._windows.clear()

    def expire(self, now: int) -> list[str]:
        """Drop from the store every state idle at event time `now` (one that would start
        afresh if used then, so no decision changes); returns their keys. Costs a pass over
        the store: call it every few minutes of event time, not per event."""
        idle_ms = self._idle
        if not idle_ms:
            return []
        store = self.store
        gone = [key for key, state in store.items() if idle(state, now, idle_ms)]
        for key in gone:
            del store[key]
            self.touched.discard(key)
            self.windows_used.pop(key, None)
        if gone:
            self.forget_states()  # cached windows may hold the dropped states
            self.timeline.forget_resolutions()  # and the configs, every principal they resolved
        return gone

    def expire_due(self, now: int) -> list[str]:
        """`expire` when a sweep is due (`EngineSettings.sweep_every_ms`), for a driver with one
        store (a driver that swaps stores keeps a `Cadence` per store)."""
        return self.expire(now) if self._sweeps.due(now) else []

    def drain_windows(self) -> dict[str, Window]:
        """The windows checked since the last call, by state key, each with its last
        `observed` (a driver that shows the busiest entities calls this after each batch)."""
        used, self.windows_used = self.windows_used, {}
        return used

    def drain_touched(self) -> set[str]:
        touched, self.touched = self.touched, set()
        self._drains += 1
        return touched

    def resolved_entities(self, mutation: bool, user: str, client_id: str, api: str, ts: int,
                          arrival: int = FOREVER) -> list[tuple[str, str, str]]:
        """(quota, user, client id) of the entity each client quota type of a request (or a
        mutation) resolves to under the configs in force for it; types that are off are left
        out. What a driver that routes events needs (`app.intake.routes`)."""
        configs = self.timeline.at(ts, arrival).configs
        out: list[tuple[str, str, str]] = []
        for quota in client_quotas(mutation, api):
            res = configs.resolve(quota, user, client_id)
            if res is not None:
                out.append((quota, res.user, res.client_id))
        return out

    # -- client quotas: produce, fetch, request ------------------------------------------------

    def _key(self, code: str, broker: int, a: str, b: str) -> str:
        if self.cluster:
            return f"{code}{SEP}*{SEP}{a}{SEP}{b}"
        return f"{code}{SEP}{broker}{SEP}{a}{SEP}{b}"

    def _window_rate(self, window: Window) -> Rate:
        """The window's state: remembered while the store is the same object, else looked up."""
        rate = window.rate
        if rate is None or window.store is not self.store:
            rate = window.rate = self._rate(window.key)
            window.store = self.store
            window.shares = window.debt = None
            window.drain = self._drains
            self.windows_used[window.key] = window
        elif window.drain != self._drains:
            self.touched.add(window.key)
            window.drain = self._drains
            self.windows_used[window.key] = window
        return rate

    def _rate(self, key: str) -> Rate:
        state = self.store.get(key)
        if state is None:
            state = Rate()
            self.store[key] = state
        self.touched.add(key)
        return state  # type: ignore[return-value]

    def _principal(self, broker: int, enforcer: int, user: str, client_id: str
                   ) -> tuple[Window | None, ...]:
        """The (produce, fetch, request, mutation) windows of an event's principal on its broker
        (an allocated window with `limits`: on its `enforcer`, `RequestEvent.enforcer`).

        None where that quota type is off. Cached until the configs change: resolution and key
        building are otherwise most of the per-event cost.
        """
        pk = (broker, enforcer, user, client_id)
        cached = self._principals.get(pk)
        if cached is not None:
            return cached
        windows: list[Window | None] = []
        limits = self.limits
        for quota in (cfg.PRODUCE, cfg.FETCH, cfg.REQUEST, cfg.MUTATION):
            res = self._configs.resolve(quota, user, client_id)
            if res is None:
                windows.append(None)
                continue
            limit, w, where, split = res.limit, self._w, broker, 0.0
            if limits is not None and quota in ALLOCATED:
                limit = limits.limit(quota, res.user, res.client_id, enforcer, res.limit)
                where = enforcer
                if not limits.kafka_formula:
                    w, split = self._aw, limits.split(res.limit)
            key = self._key(KEY_CODE[quota], where, res.user, res.client_id)
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = Window(
                    quota, key, {"user": res.user, "client_id": res.client_id}, limit,
                    res.level, w, split)
            windows.append(window)
        if len(self._principals) >= cfg.MAX_RESOLVED:
            self._forget_windows()
        cached = self._principals[pk] = tuple(windows)
        return cached

    def _allocated_throttle(self, window: Window, t: int, value: float, cap: int | None) -> int:
        """The throttle of a request on an allocated window: its debt, repaid at the
        enforcer's limit, but at most one window span or the debt repaid at the quota's static
        split (quota / live enforcers), whichever is longer.

        The debt is a token bucket (KIP-599's: refilled at the limit, bursting to what the
        window holds, allowed below zero) charged with every request. Kafka's formula,
        X = (O - T)/T x W, assumes the window keeps what it holds while the client waits; over
        an enforcer's short window (11 x 100 ms) its samples leave during the wait, and a client
        with requests of a fifth of the window, or several in flight, gets well over its limit
        (docs/allocations.md). A debt is forgotten only when it is repaid.

        The bound is for a client that comes back to an enforcer whose allocation fell to the
        floor while it was away or muted, with what piled up meanwhile: repaid at the floor
        (1 MB at 20 kB/s: 50 s) it would sit muted, and a muted client reads as idle, so the
        allocation would never recover. It waits as if its enforcer held the split, and the
        rest of its debt stays: the next request's throttle counts it, so over time the enforcer
        still admits its limit, no more.

        Example: at the floor, 0.05 Q, of a quota split over two (0.5 Q each), a full bucket
        (0.05 Q x 1.1 s) takes 1.2 Q in one request: the debt is 1.145 Q, 22.9 s at the floor,
        bounded to 1.145 / 0.5 = 2.29 s."""
        limit = window.limit
        if limit >= UNLIMITED:
            return 0
        full = burst(limit, self._n, window.w)
        debt = window.debt
        if debt is None:
            key = DEBT_CODE + SEP + window.key
            state = self.store.get(key)
            if not isinstance(state, TokenBucket):
                state = TokenBucket(full, t)
                self.store[key] = state
            self.touched.add(key)
            debt = window.debt = state
        t = debt.advance(t, self._idle, full)  # in use: not idle (`expire`)
        debt.record(value, t, limit, full)
        if debt.tokens >= 0.0:
            return 0
        longest = max(self._n * window.w, token_throttle_time_ms(debt.tokens, window.split))
        if cap is not None:
            longest = min(longest, cap)
        throttle = saturate_int(min(token_throttle_time_ms(debt.tokens, limit), longest))
        debt.until = max(debt.until, t + throttle)
        return throttle

    def allowance(self, quota: str, enforcer: int, user: str, client_id: str) -> float | None:
        """What a principal's `quota` window on `enforcer` holds at its limit over its full
        samples (Kafka's `getMaxValueInQuotaWindow`: limit x (N-1) x sample), by the latest
        configs and the limits in force; None when no such quota applies. An allocated window
        holds its allocation over its short samples.

        Example: a 1 MB/s consumer quota in Kafka's 11 x 1 s windows holds 10 MB; its
        allocation of 200 kB/s over 11 x 100 ms samples holds 200 kB."""
        res = self.timeline.latest.resolve(quota, user, client_id)
        if res is None:
            return None
        limit, w, limits = res.limit, self._w, self.limits
        if limits is not None and quota in ALLOCATED:
            limit = limits.limit(quota, res.user, res.client_id, enforcer, res.limit)
            if not limits.kafka_formula:
                w = self._aw
        if limit >= UNLIMITED:
            return None
        return limit * (self._n - 1) * w / 1000.0

    def _check(self, window: Window, rate: Rate, t: int, value: float, cap: int | None,
               where: int, count: int, decisions: list[Decision]) -> int:
        """Sensor.record with the quota check: record, measure, throttle if over the bound.
        `cap`: the longest throttle (None: Kafka's, uncapped); an allocated window's throttle is
        its debt's (`_allocated_throttle`);
        `where`: the broker (broker scope), or the enforcer the usage counts on (cluster);
        `count`: the requests `value` sums (allocations tell a request's size from it)."""
        observed = rate.record_measure(value, t, self._n, window.w)
        limit = window.limit
        throttle = 0
        action = "none"
        if window.split:
            throttle = self._allocated_throttle(window, t, value, cap)
            if throttle > 0:
                action = "throttle"
                self._throttled = True
        elif observed > limit:
            if cap is None:
                throttle = saturate_int(throttle_time_ms(observed, limit, rate.window))
            else:
                throttle = saturate_int(bounded_throttle_time_ms(observed, limit, rate.window, cap))
            if throttle > 0:
                action = "throttle"
            self._throttled = True
        window.observed = observed
        sources = window.sources
        if sources is not None:
            sources[where] = sources.get(where, 0.0) + value
        if throttle > 0 or not self._quiet:
            decisions.append(Decision(window.quota, window.entity, throttle, action, observed,
                                      limit, rate.window, window.level, window.key, t,
                                      None if self.cluster else where))
        if self._allocate:
            self._share(window, where, value, t, count)
        return throttle

    # -- allocations (cluster scope) -------------------------------------------------------------

    def _share(self, window: Window, enforcer: int, value: float, t: int, count: int) -> None:
        """Count a cluster window's usage by `count` requests on `enforcer` (a named gateway
        when the row's is: `_row_gateway`), answered with the row's throttle; re-divide its
        quota first when a check is due (so a check at a span's first usage sees the last span
        whole)."""
        key = SHARES_CODE + SEP + window.key
        shares = window.shares
        if shares is None:
            state = self.store.get(key)
            if not isinstance(state, Shares):
                state = Shares()
                self.store[key] = state
            shares = window.shares = state
        self.touched.add(key)
        horizon = self._gateways if self._row_gateway else self._brokers
        t = shares.advance(t, self._span,
                           horizon.fetch_depth if window.quota == cfg.FETCH else horizon.depth)
        if t >= shares.checked + allocation.CHECK_MS:
            self._reallocate(window, shares, t, horizon)
        shares.add(enforcer, value, t, count, self._row_throttle)

    def _reallocate(self, window: Window, shares: Shares, t: int, horizon: Horizon) -> None:
        """Publish the window's allocation when it moved enough or is half way through its
        validity (`app.engine.allocation`); `horizon`: what its enforcers hold it over."""
        limit = window.limit
        span, ew = self._span, horizon.window_ms
        shares.checked = t
        if limit >= UNLIMITED or t < shares.since + 2 * span or not shares.enforcers:
            return
        rates = shares.rates(t, span)
        before = shares.allocated
        if 0.0 < shares.limit != limit:  # the quota changed: enforcers scaled theirs already
            before = [a * limit / shares.limit for a in before]
        elif not any(before):  # none published yet: the enforcers hold the static split
            before = [limit / len(before)] * len(before)
        saturated = allocation.saturation(rates, before, shares.grains(t, span),
                                          shares.throttled(t, horizon.muting))
        held = shares.held(t, ew, span)
        # since the last allocation (before the first: the static split, since the first usage)
        elapsed = t - (shares.published if shares.published >= 0 else shares.since)
        keep = allocation.kept(held, before, ew, elapsed)
        new = allocation.allocate(limit, rates, before, keep, saturated)
        if horizon.trimmed:
            # what each admitted per second, over the windows its trim is measured over
            measured = (allocation.FETCH_TRIM_WINDOWS if window.quota == cfg.FETCH else 1) * ew
            admitted = [h * 1000.0 / measured for h in shares.held(t, measured, span)]
            trims = allocation.trimmed(shares.trim, admitted, before, saturated, ew, elapsed)
        else:
            trims = [1.0] * len(new)
        bounds = [a * k for a, k in zip(new, trims)]
        refresh = t >= shares.published + self._validity // 2
        if not refresh and not allocation.moved(limit, shares.limit, bounds, shares.bounds()):
            return
        # muted clients send nothing to refresh it with: it outlives their mutes by a window
        valid_until = min(t + allocation.MAX_VALIDITY_MS,
                          max(t + self._validity, max(shares.muted) + ew))
        self._allocs.append(allocation.allocation_record(
            t, window.entity, window.quota, limit, self._n * self._w, window.level, valid_until,
            list(shares.enforcers), new, rates, saturated, trims))
        shares.allocated, shares.trim, shares.limit = new, trims, limit
        shares.until, shares.published = valid_until, t

    def _request_event(self, event: RequestEvent, only: int, decisions: list[Decision]) -> None:
        enforcer = event.enforcer
        self._row_gateway = event.gateway >= 0
        self._request_row(event.ts, event.broker, enforcer,
                          self._principal(event.broker, enforcer, event.user, event.client_id),
                          event.api, event.bytes, nanos(event.thread_ms), nanos(event.network_ms),
                          event.exempt, event.count, event.throttle_ms, only, decisions)

    def _request_row(self, ts: int, broker: int, enforcer: int,
                     windows: tuple[Window | None, ...], api: str, nbytes: int, thread_ns: int,
                     network_ns: int, exempt: bool, count: int, throttle_ms: int, only: int,
                     decisions: list[Decision]) -> None:
        """One request sample on its principal's `windows` (`_principal`); `only`: the quota
        types to process (`PRODUCE_BIT`...); `throttle_ms`: what its enforcer answered it with.

        `where` is the broker a decision names (broker scope), or the enforcer its usage counts
        on (cluster scope: allocations)."""
        where = enforcer if self.cluster else broker
        self._row_throttle = throttle_ms
        produce, fetch, request, _ = windows
        if only != ALL_QUOTAS:
            produce = produce if only & PRODUCE_BIT else None
            fetch = fetch if only & FETCH_BIT else None
            request = request if only & REQUEST_BIT else None
        if exempt:
            self.exempt_requests += count
            request = None
        if api == "Produce":
            # KafkaApis.handleProduceRequest: bandwidth first, then request time. A sample of
            # no request (count 0) is the time of one an earlier sample counted: the gateway
            # charges a Produce's bytes as it forwards it, its time when the answer comes
            if produce is not None and count:
                rate = self._window_rate(produce)
                t = rate.advance(ts, self._idle)
                self._check(produce, rate, t, nbytes, None, where, count, decisions)
            if request is not None:
                self._request_time(request, ts, thread_ns, network_ns, where, count, decisions)
        elif api == "Fetch" and not exempt:
            # handleFetchRequest: request time first, then bytes; a throttled fetch sends an
            # empty response, so its bytes are taken back out of the window (either cause)
            self.kept_fetch = False
            rq = 0 if request is None else self._request_time(request, ts, thread_ns, network_ns,
                                                              where, count, decisions)
            if fetch is not None and count:
                rate = self._window_rate(fetch)
                t = rate.advance(ts, self._idle)
                bw = self._check(fetch, rate, t, nbytes, None, where, count, decisions)
                throttled = bw > 0 or rq > 0
                # an allocated window delivers it and keeps its bytes
                self.kept_fetch = throttled and fetch.split > 0.0
                if throttled and self.take_back and not self.kept_fetch:
                    rate.record(-nbytes, t, self._n, fetch.w)
        elif request is not None:
            self._request_time(request, ts, thread_ns, network_ns, where, count, decisions)

    def _request_time(self, window: Window, ts: int, thread_ns: int, network_ns: int, where: int,
                      count: int, decisions: list[Decision]) -> int:
        """Thread time with the quota check (capped at one window), network time without."""
        rate = self._window_rate(window)
        t = rate.advance(ts, self._idle)
        throttle = self._check(window, rate, t, thread_ns * NANOS_TO_PERCENT, window.w, where,
                               count, decisions)
        if network_ns:
            rate.record(network_ns * NANOS_TO_PERCENT, t, self._n, window.w)
            sources = window.sources
            if sources is not None:
                sources[where] = sources.get(where, 0.0) + network_ns * NANOS_TO_PERCENT
            if window.debt is not None:
                window.debt.record(network_ns * NANOS_TO_PERCENT, t, window.limit,
                                   burst(window.limit, self._n, window.w))
        return throttle

    def process_requests(self, batch: RequestColumns, decisions: list[list[Decision]] | None = None
                         ) -> list[tuple[dict[str, Any], int]]:
        """Apply a batch of request samples, row by row in order (what `process` does for each
        as a `RequestEvent`); return the directives to publish, each with its row's index.

        `decisions`: a list to receive each row's decisions (replay, the audit); None builds
        a `Decision` only for a throttle (what a directive needs): the live aggregate reads
        each window's last `observed` from `drain_windows` instead.

        Rows are processed in their order, so each window sees its own rows in order, as in
        `process`. Per row it saves what `process` pays per event: the configs are looked up
        again only when a row leaves the stretch of the timeline they are in force for, and a
        principal's windows are found by one integer of the batch's name indices.
        """
        out: list[tuple[dict[str, Any], int]] = []
        n = len(batch)
        if not n:
            return out
        names = batch.names
        ts_col, broker_col, gateway_col = batch.ts, batch.broker, batch.gateway
        user_col, client_col, api_col = batch.user, batch.client_id, batch.api
        bytes_col, thread_col, network_col = batch.bytes, batch.thread_ns, batch.network_ns
        exempt_col, count_col, arrival_col, only_col = batch.exempt, batch.count, batch.arrival, batch.only
        throttle_col = batch.throttle_ms
        # the configs are looked up again only when a row leaves the stretch of the timeline
        # they are in force for (rarely); an enforcer's limits may change at any row
        per_row = self.limits is not None
        t0 = t1 = a0 = a1 = 0
        quiet = decisions is None
        self._quiet = quiet
        row: list[Decision] = []
        # the batch's principals by one integer (names are indices): a dict lookup of an int
        # instead of building and comparing a (broker, enforcer, user, client id) tuple
        principals: dict[int, tuple[Window | None, ...]] = {}
        hosts: dict[tuple[int, int], int] = {}  # (broker, enforcer) pairs of the batch, numbered
        size = len(names)
        # columns most batches leave at their defaults are read only when some row sets them
        gateways, onlys = max(gateway_col) >= 0, max(only_col) > 0
        last_broker = last_enforcer = h = -1
        for i in range(n):
            ts, arrival = ts_col[i], arrival_col[i]
            if per_row:
                self._configs_at(ts, arrival)
            elif ts < t0 or ts >= t1 or arrival < a0 or arrival >= a1:
                stretch = self.timeline.at(ts, arrival)
                t0, t1, a0, a1 = stretch.t0, stretch.t1, stretch.a0, stretch.a1
                if stretch.id != self._snapshot_id:
                    principals.clear()
                self._configs_at(ts, arrival)
            self._throttled = False
            broker = broker_col[i]
            enforcer = broker
            self._row_gateway = False
            if gateways:
                gateway = gateway_col[i]
                if gateway >= 0:
                    enforcer = gateway
                    self._row_gateway = True
            only = only_col[i] if onlys else 0
            user, client = user_col[i], client_col[i]
            if per_row:
                windows = self._principal(broker, enforcer, names[user], names[client])
            else:
                if broker != last_broker or enforcer != last_enforcer:
                    last_broker, last_enforcer = broker, enforcer
                    host = (broker, enforcer)
                    found_h = hosts.get(host)
                    if found_h is None:
                        found_h = hosts[host] = len(hosts)
                    h = found_h
                pk = (h * size + user) * size + client
                found = principals.get(pk)
                if found is None:
                    found = principals[pk] = self._principal(broker, enforcer, names[user],
                                                             names[client])
                windows = found
            if not quiet:
                row = []
            self._request_row(ts, broker, enforcer, windows, names[api_col[i]],
                              bytes_col[i], thread_col[i], network_col[i], exempt_col[i] != 0,
                              count_col[i], throttle_col[i], only if only else ALL_QUOTAS, row)
            if decisions is not None:
                decisions.append(row)
            if self._throttled or self._allocs:
                for directive in self._directives(row):
                    out.append((directive, i))
                if quiet:
                    row.clear()
        self._quiet = False
        return out

    # -- controller mutations ------------------------------------------------------------------

    def _mutation(self, event: MutationEvent, decisions: list[Decision]) -> None:
        """Strict requests check then record (reject while in debt); older ones record then check."""
        window = self._principal(event.broker, event.broker, event.user, event.client_id)[3]
        if window is None:
            return
        key, entity, rate, level = window.key, window.entity, window.limit, window.level
        n, w = self._cn, self._cw
        full = burst(rate, n, w)
        bucket = self.store.get(key)
        if not isinstance(bucket, TokenBucket):
            bucket = TokenBucket(full, event.ts)
            self.store[key] = bucket
        self.touched.add(key)
        t = bucket.advance(event.ts, self._idle, full)
        tokens = bucket.refill(t, rate, full)
        action = "none"
        throttle = 0
        if event.strict:
            if tokens < 0:
                throttle, action = token_throttle_time_ms(tokens, rate), "reject"
                if not self.take_back:  # the broker admitted it before the directive arrived
                    bucket.record(event.partitions, t, rate, full)
            else:
                bucket.record(event.partitions, t, rate, full)
        else:
            bucket.record(event.partitions, t, rate, full)
            if bucket.tokens < 0:
                throttle, action = token_throttle_time_ms(bucket.tokens, rate), "throttle"
        self._throttled = self._throttled or throttle > 0
        decisions.append(Decision(
            cfg.MUTATION, entity, saturate_int(throttle), action, bucket.tokens, rate, n * w,
            level, key, t, None if self.cluster else event.broker,
        ))

    # -- connections -----------------------------------------------------------------------------

    def _conn_check(self, key: str, t: int, limit: float, level: str | None, quota: str,
                    entity: dict[str, Any], action: str, broker: int | None,
                    decisions: list[Decision]) -> tuple[int, Rate]:
        rate = self._rate(key)
        t = rate.advance(t, self._idle)
        n, w = self._n, self._w
        observed = rate.record_measure(1, t, n, w)
        throttle = 0
        if observed > limit:
            cap = w if self.take_back else INT_MAX
            throttle = saturate_int(bounded_throttle_time_ms(observed, limit, rate.window, cap))
            self._throttled = self._throttled or throttle > 0
        decisions.append(Decision(quota, entity, throttle, action if throttle > 0 else "none",
                                  observed, limit, rate.window, level, key, t, broker))
        return throttle, rate

    def _connection(self, event: ConnectionEvent, decisions: list[Decision]) -> None:
        """ConnectionQuotas.inc: broker and listener rates delay; the IP rate closes.

        The inter-broker listener is not counted in the broker-wide rate. The IP sample is taken
        after the acceptor's delay, as Kafka's acceptor thread blocks before recording it; a
        throttled connection is closed and taken back out of the IP, listener and broker rates.
        """
        broker, listener = event.broker, event.listener
        configs = self._configs
        t = event.ts
        delay = 0
        broker_rate = None
        if not event.inter_broker:
            limit, level = configs.broker_limit(broker, None)
            b, broker_rate = self._conn_check(
                f"CB{SEP}{broker}", t, limit, level, cfg.BROKER_RATE, {"broker": broker},
                "delay_connection", broker, decisions)
            delay = b
        limit, level = configs.broker_limit(broker, listener)
        lt, listener_rate = self._conn_check(
            f"CL{SEP}{broker}{SEP}{listener}", t, limit, level, cfg.BROKER_RATE,
            {"broker": broker, "listener": listener}, "delay_connection", broker, decisions)
        delay = max(delay, lt)
        ip_limit = configs.ip_limit(event.ip)
        if ip_limit is None:
            return
        t_ip = t + delay
        ip_key = f"CI{SEP}*{SEP}{event.ip}" if self.cluster else f"CI{SEP}{broker}{SEP}{event.ip}"
        throttle, ip_rate = self._conn_check(
            ip_key, t_ip, ip_limit[0], ip_limit[1], cfg.IP_RATE, {"ip": event.ip},
            "close_connection", None if self.cluster else broker, decisions)
        if throttle > 0 and self.take_back:
            n, w = self._n, self._w
            for rate in (ip_rate, listener_rate, broker_rate):
                if rate is not None:
                    rate.record(-1, rate.advance(t_ip), n, w)

    # -- directives ----------------------------------------------------------------------------

    def _emit(self, d: Decision) -> bool:
        """The directive rule (module docstring), remembered in the state so it survives failover."""
        state = self.store[d.key]
        until = d.ts + d.throttle_time_ms
        if state.until <= d.ts or until > state.until + self._ext:
            state.until = until
            return True
        return False

    def _directive(self, d: Decision) -> dict[str, Any]:
        scope = "broker" if d.broker is not None else "cluster"
        return {
            "v": 1, "ts": d.ts, "scope": scope, "broker": d.broker, "entity": d.entity,
            "quota": d.quota, "action": d.action, "throttle_time_ms": d.throttle_time_ms,
            "until": d.ts + d.throttle_time_ms, "observed": d.observed, "limit": d.limit,
            "window_ms": d.window_ms, "config_level": d.config_level,
        }
