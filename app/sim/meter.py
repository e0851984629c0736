"""Ground truth of a simulation: what the simulated brokers let through, per quota entity.

The quota entity is the one Kafka's resolution picks (who shares the window and the limit),
taken from the engine's own `QuotaConfigs.resolve`, so "alice's producer_byte_rate" here is the
same window the workers enforce. Amounts are kept per 1 s bucket and per broker, so the report
can give the cluster-wide rate, each broker's rate and a time series.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator

from app.audit.recommend import percentiles
from app.engine import configs as cfg
from app.engine.configs import QuotaConfigs
from app.engine.kafka_math import INT_MAX_F, UNLIMITED

UNITS = {cfg.PRODUCE: "B/s", cfg.FETCH: "B/s", cfg.REQUEST: "%", cfg.MUTATION: "partitions/s",
         cfg.IP_RATE: "conn/s", cfg.BROKER_RATE: "conn/s"}
OUTCOMES = ("throttled", "rejected", "closed", "delayed")
#: a phase's rate has settled once it stays within this share of the limit ...
SETTLE_BAND = 0.2
#: ... for this many whole seconds in a row
SETTLE_RUN = 3
DEFAULT_IP = "ip=<default>"


def client_label(user: str, client_id: str) -> str:
    parts = [f"user={user}"] if user else []
    if client_id:
        parts.append(f"client_id={client_id}")
    return " ".join(parts) or "user= client_id="


@dataclass
class Row:
    """One quota entity: its limit and what was let through, per (second, broker)."""

    quota: str
    entity: str
    limit: float | None
    level: str | None
    amounts: dict[tuple[int, int], float] = field(default_factory=lambda: defaultdict(float))
    outcomes: Counter[tuple[int, str]] = field(default_factory=Counter)
    members: set[str] = field(default_factory=set)  # IPs sharing a default IP quota
    brokers: set[int] = field(default_factory=set)

    @property
    def unit(self) -> str:
        return UNITS[self.quota]

    @property
    def divisor(self) -> int:
        """Rates of a default IP quota are shown per IP (the limit applies to each)."""
        return max(1, len(self.members)) if self.entity == DEFAULT_IP else 1


@dataclass(frozen=True)
class Summary:
    """Steady-state figures of one row, over [warmup, end)."""

    quota: str
    entity: str
    limit: float | None
    level: str | None
    unit: str
    achieved: float
    per_broker: dict[int, float]
    seconds: int
    outcomes: dict[str, int]
    #: the 95th percentile of the per-second cluster-wide rate
    p95: float = 0.0

    @property
    def ratio(self) -> float | None:
        return None if not self.limit else self.achieved / self.limit

    @property
    def p95_ratio(self) -> float | None:
        """How far above the limit the cluster-wide rate goes in its worst 5% of seconds."""
        return None if not self.limit else self.p95 / self.limit

    @property
    def max_broker_ratio(self) -> float | None:
        if not self.limit or not self.per_broker:
            return None
        return max(self.per_broker.values()) / self.limit


@dataclass(frozen=True)
class PhaseFigures:
    """An entity's per-second cluster-wide rate over one phase, against its limit."""

    seconds: int
    mean_ratio: float
    p95_ratio: float
    #: whole seconds from the phase's start until the rate stayed within `SETTLE_BAND` of the
    #: limit for `SETTLE_RUN` seconds (None: it never did)
    settled_s: int | None


def settled_after(ratios: list[float]) -> int | None:
    """How many seconds pass before `SETTLE_RUN` seconds in a row within `SETTLE_BAND`."""
    run = 0
    for i, r in enumerate(ratios):
        run = run + 1 if abs(r - 1.0) <= SETTLE_BAND else 0
        if run == SETTLE_RUN:
            return i + 1 - SETTLE_RUN
    return None


def phase_figures(ratios: list[float]) -> PhaseFigures:
    """The figures of a phase from its per-second rates, each x the limit."""
    return PhaseFigures(len(ratios), sum(ratios) / len(ratios), percentiles(ratios, (0.95,))[0],
                        settled_after(ratios))


class Meter:
    def __init__(self, configs: QuotaConfigs, start_ms: float, bucket_ms: int = 1000) -> None:
        self.configs = configs
        self.start_ms = start_ms
        self.bucket_ms = bucket_ms
        self.rows: dict[tuple[str, str], Row] = {}
        self.first_bucket = 0  # buckets before this were pruned
        self._client_rows: dict[tuple[str, str, str], Row | None] = {}

    def bucket(self, t: float) -> int:
        return max(0, int((t - self.start_ms) // self.bucket_ms))

    def _row(self, quota: str, entity: str, limit: float | None, level: str | None) -> Row:
        key = (quota, entity)
        row = self.rows.get(key)
        if row is None:
            if limit is not None and (limit >= UNLIMITED or limit == INT_MAX_F):
                limit = None
            row = self.rows[key] = Row(quota, entity, limit, level)
        return row

    def client_row(self, quota: str, user: str, client_id: str, always: bool = True) -> Row | None:
        """The row of Kafka's window for this quota and principal (None: unmetered)."""
        key = (quota, user, client_id)
        try:
            return self._client_rows[key]
        except KeyError:
            pass
        res = self.configs.resolve(quota, user, client_id)
        if res is not None and res.limit < UNLIMITED:
            row: Row | None = self._row(quota, client_label(res.user, res.client_id), res.limit, res.level)
        elif always:
            row = self._row(quota, client_label(user, client_id), None, None)
        else:
            row = None
        self._client_rows[key] = row
        return row

    def add(self, row: Row | None, broker: int, t: float, amount: float,
            outcome: str | None = None) -> None:
        if row is None:
            return
        b = self.bucket(t)
        row.brokers.add(broker)
        if amount:
            row.amounts[(b, broker)] += amount
        if outcome is not None:
            row.outcomes[(b, outcome)] += 1

    # -- what brokers report -----------------------------------------------------------------

    def request(self, broker: int, t: float, api: str, user: str, client_id: str, nbytes: int,
                thread_ms: float, throttled: bool) -> None:
        quota = cfg.PRODUCE if api == "Produce" else cfg.FETCH
        outcome = "throttled" if throttled else None
        self.add(self.client_row(quota, user, client_id), broker, t, nbytes, outcome)
        self.add(self.client_row(cfg.REQUEST, user, client_id, always=False), broker, t,
                 thread_ms * 100.0 / 1000.0, outcome)

    def mutation(self, broker: int, t: float, user: str, client_id: str, partitions: int,
                 outcome: str | None) -> None:
        self.add(self.client_row(cfg.MUTATION, user, client_id), broker, t, partitions, outcome)

    def connection(self, broker: int, t: float, listener: str, ip: str, outcome: str | None) -> None:
        """`outcome` None or "delayed" means accepted; "closed" means refused."""
        accepted = 0 if outcome == "closed" else 1
        ip_limit = self.configs.ip_limit(ip)
        if ip_limit is not None:  # IPs without a connection_creation_rate are not metered
            limit, level = ip_limit
            if level == f"/config/ips/{ip}":
                row = self._row(cfg.IP_RATE, f"ip={ip}", limit, level)
            else:
                row = self._row(cfg.IP_RATE, DEFAULT_IP, limit, level)
                row.members.add(ip)
            self.add(row, broker, t, accepted, outcome if outcome == "closed" else None)
        for lst in (None, listener):
            rate, path = self.configs.broker_limit(broker, lst)
            if rate != INT_MAX_F:
                name = f"broker={broker}" + (f" listener={lst}" if lst else "")
                self.add(self._row(cfg.BROKER_RATE, name, rate, path), broker, t, accepted,
                         outcome if outcome == "delayed" else None)

    # -- results -------------------------------------------------------------------------------

    def summaries(self, warmup_s: float, end_ms: float) -> list[Summary]:
        """Steady-state rate of every row over the whole seconds in [warmup, end)."""
        first = max(math.ceil(warmup_s * 1000 / self.bucket_ms), self.first_bucket)
        last = self.bucket(end_ms)  # the bucket in progress at the end is not complete
        seconds = max(0, last - first) * self.bucket_ms / 1000.0
        out = []
        for row in sorted(self.rows.values(), key=lambda r: (r.quota, r.entity)):
            per_broker: dict[int, float] = defaultdict(float)
            for (b, broker), amount in row.amounts.items():
                if first <= b < last:
                    per_broker[broker] += amount
            div = row.divisor
            rates = {k: v / seconds / div if seconds else 0.0 for k, v in sorted(per_broker.items())}
            for broker in row.brokers:
                rates.setdefault(broker, 0.0)
            outcomes = {o: 0 for o in OUTCOMES}
            for (b, o), n in row.outcomes.items():
                if first <= b < last:
                    outcomes[o] += n
            out.append(Summary(row.quota, row.entity, row.limit, row.level, row.unit,
                               sum(rates.values()), dict(sorted(rates.items())),
                               max(0, last - first), outcomes,
                               self._p95(row, first, last)))
        return out

    def _p95(self, row: Row, first: int, last: int) -> float:
        per_second = self.per_second(row, first, last)
        return percentiles(per_second, (0.95,))[0] if per_second else 0.0

    def phase(self, row: Row, start_s: float, end_s: float) -> PhaseFigures | None:
        """The row's figures over the whole seconds in [start_s, end_s) (None: no limit or no
        whole second)."""
        first = math.ceil(start_s * 1000 / self.bucket_ms)
        last = math.floor(end_s * 1000 / self.bucket_ms)
        if not row.limit or last <= first:
            return None
        return phase_figures([v / row.limit for v in self.per_second(row, first, last)])

    def per_second(self, row: Row, first: int, last: int) -> list[float]:
        """The row's cluster-wide rate in each whole bucket of [first, last), per second."""
        totals = [0.0] * max(0, last - first)
        for (b, _), amount in row.amounts.items():
            if first <= b < last:
                totals[b - first] += amount
        scale = 1000.0 / self.bucket_ms / row.divisor
        return [v * scale for v in totals]

    def series(self, end_ms: float) -> Iterator[dict[str, Any]]:
        """Long-format time series: one row per (second, entity, broker or "all")."""
        last = self.bucket(end_ms)
        for row in sorted(self.rows.values(), key=lambda r: (r.quota, r.entity)):
            div = row.divisor
            brokers = sorted(row.brokers)
            for b in range(self.first_bucket, last):
                per = {br: row.amounts.get((b, br), 0.0) / div for br in brokers}
                counts = {o: row.outcomes.get((b, o), 0) for o in OUTCOMES}
                base = {"t_s": (b + 1) * self.bucket_ms / 1000.0, "quota": row.quota,
                        "entity": row.entity, "limit": row.limit, "unit": row.unit}
                yield {**base, "broker": "all", "achieved": sum(per.values()) * 1000.0 / self.bucket_ms, **counts}
                for br in brokers:
                    yield {**base, "broker": str(br), "achieved": per[br] * 1000.0 / self.bucket_ms,
                           **{o: 0 for o in OUTCOMES}}

    def recent(self, now_ms: float, seconds: int = 3) -> dict[tuple[str, str], float]:
        """Cluster-wide rate of each row over the last whole `seconds` (for live views)."""
        last = self.bucket(now_ms)
        first = max(0, last - seconds)
        span = (last - first) * self.bucket_ms / 1000.0
        out: dict[tuple[str, str], float] = {}
        for key, row in self.rows.items():
            get = row.amounts.get
            total = sum(get((b, br), 0.0) for b in range(first, last) for br in row.brokers)
            out[key] = total / span / row.divisor if span else 0.0
        return out

    def prune(self, now_ms: float, keep_s: int) -> None:
        """Forget buckets older than `keep_s` (a run without end keeps bounded memory)."""
        oldest = self.bucket(now_ms) - keep_s
        if oldest <= self.first_bucket:
            return
        self.first_bucket = oldest
        for row in self.rows.values():
            for amount_key in [k for k in row.amounts if k[0] < oldest]:
                del row.amounts[amount_key]
            for outcome_key in [k for k in row.outcomes if k[0] < oldest]:
                del row.outcomes[outcome_key]
