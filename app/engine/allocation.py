"""Allocations of a cluster-scope quota: who may use how much of it, enforcer by enforcer.

In cluster scope a quota holds on the sum over brokers. Throttling every broker until one `until`
holds the average but not the rate (all brokers mute the entity together, then release it
together). Allocations instead give each enforcer a share of the quota that it holds alone, per
request, with Kafka's own formula: the cluster-wide rate is then as smooth as a broker's. An
enforcer is what measures and throttles the requests: a gateway when the gateways are named
(`--gateway-id`: several gateways may stand in front of one broker, and one gateway in front of
many), else the broker (`RequestEvent.enforcer`).

How a window's quota `Q` is divided among the enforcers it was used on recently (`allocate`):

- every listed enforcer gets at least the floor, `FLOOR_SHARE` x Q, so one whose traffic for the
  entity dried up can still admit a returning client; an enforcer not listed at all also gets
  the floor (the record's `others`) until the next allocation lists it;
- an enforcer using clearly less than it was allocated (below `SATURATED` of it, and more than
  one of its mean requests short of it) is *unsaturated*: it gets what it uses plus `HEADROOM`,
  so its usage share sets its allocation. A quota charges whole requests, so over a span an
  enforcer admits its allocation give or take one request: one request short is all a held
  client can show, whatever its request size (`is_saturated`);
- the rest goes to the *saturated* enforcers (using about all of their allocation), split
  equally: their real demand is hidden by throttling, and the same usage share would hold any
  split forever, so max-min fairness is what moves unused share to where it is needed. With no
  saturated enforcer the rest is split by usage share among all;
- the listed allocations add up to Q, plus what the unsaturated enforcers hold and do not use,
  lent to the saturated ones: at most `LEND` x Q (`lend`).

Usage is measured per enforcer over the last span (`Shares`; `SPAN_MS`, or
`EngineSettings.allocation_span_ms`); an enforcer stays listed until two spans passed without its
usage. A span must cover what an enforcer's throttle can hide: a client muted for a whole span
reads as idle there, and an idle enforcer's allocation shrinks to what it uses. Gateways throttle
an allocated window for a fraction of a second (its debt, `QuotaEngine`), so one second will do;
brokers throttle with Kafka's own unbounded formula over windows of whole seconds (the broker
plugin), so their span is several of those windows. Enforcers hold allocations over windows of short samples
(`EngineSettings.allocation_sample_ms`), so one whose allocation drops under what its window
holds is throttled for a fraction of a second, not for the tens of seconds Kafka's formula gives
over a full 11-second window. The first allocation of a window waits until its usage was seen
for one span (enforcers use the static split, quota / live enforcers, until then: the one that
reported first must not take the whole quota). Allocations are re-computed at most every
`CHECK_MS` of event time and published only when an enforcer's allocation moved by more than
`THRESHOLD` x Q, the set of enforcers changed, the quota changed, or half of the last one's
validity passed.

Pure, driven by event time, like the rest of the engine.
"""

from __future__ import annotations

from typing import Any, Final

#: the least any enforcer is allocated, as a share of the quota
FLOOR_SHARE: Final = 0.05
#: an enforcer using at least this share of its allocation is treated as wanting more
SATURATED: Final = 0.9
#: an unsaturated enforcer is allocated its usage times this
HEADROOM: Final = 1.25
#: the most an allocation lends the saturated enforcers, as a share of the quota, out of what
#: the unsaturated ones hold and do not use (`lend`): the listed limits add up to at most
#: (1 + LEND) x Q
LEND: Final = 0.1
#: republish when some enforcer's allocation moves by more than this share of the quota
THRESHOLD: Final = 0.1
#: usage is measured over the last span (ms of event time), unless the engine is given another
SPAN_MS: Final = 1000
#: an enforcer still using its allocation keeps at least half of it per span (`SPAN_MS` by
#: default), and no more than its usage with headroom: a limit that falls faster than the
#: enforcer's window empties throttles for longer than that window, and a muted client reads as
#: idle, which would cut its allocation further
HALVING_MS: Final = SPAN_MS
#: allocations are re-computed at most this often (ms of event time)
CHECK_MS: Final = 100
#: most enforcers one window's usage is tracked for (beyond: they share `others`)
MAX_ENFORCERS: Final = 1024
#: the shortest validity an allocation may have: two checks
MIN_VALIDITY_MS: Final = 2 * CHECK_MS


class Shares:
    """One cluster-scope window's recent usage per enforcer and the allocation last published.

    Usage is a sliding estimate over the last span (`span`, `SPAN_MS` by default) from two
    fixed spans. `clock` and
    `until` (the last allocation's validity) play the same part as in `Rate`: an idle state
    with no allocation in force may be dropped.
    """

    __slots__ = ("clock", "until", "since", "start", "enforcers", "cur", "prev", "cur_n",
                 "prev_n", "allocated", "limit", "next_check")

    def __init__(self) -> None:
        self.clock = 0
        self.until = 0
        self.since = -1  # when the first usage was counted
        self.start = 0  # of the current span
        self.enforcers: list[int] = []
        self.cur: list[float] = []
        self.prev: list[float] = []
        #: requests counted in `cur` and `prev` (`grains`)
        self.cur_n: list[float] = []
        self.prev_n: list[float] = []
        #: the last published allocation per enforcer (0.0: not in it)
        self.allocated: list[float] = []
        #: the quota the last allocation divided (0.0: none published, or it must be republished)
        self.limit = 0.0
        self.next_check = 0

    def record(self, enforcer: int, value: float, t: int, span: int = SPAN_MS,
               count: int = 1) -> None:
        """Count `value` used by `count` requests on `enforcer` at `t` (event time; earlier
        times count as the latest), in spans of `span` ms."""
        if t < self.clock:
            t = self.clock
        self.clock = t
        if self.since < 0:
            self.since = t
        if t >= self.start + span:
            self._roll(t, span)
        enforcers = self.enforcers
        if enforcer in enforcers:
            i = enforcers.index(enforcer)
            self.cur[i] += value
            self.cur_n[i] += count
        elif len(enforcers) < MAX_ENFORCERS:
            enforcers.append(enforcer)
            self.cur.append(value)
            self.prev.append(0.0)
            self.cur_n.append(float(count))
            self.prev_n.append(0.0)
            self.allocated.append(0.0)

    def _roll(self, t: int, span: int) -> None:
        """Start the span holding `t`; enforcers with no usage in the last two spans are dropped
        (an enforcer's window is far shorter: theirs is empty, they lose nothing)."""
        adjacent = t < self.start + 2 * span
        keep = [i for i, v in enumerate(self.cur) if v > 0.0 or (adjacent and self.prev[i] > 0.0)]
        if len(keep) < len(self.cur):
            if any(self.allocated[i] > 0.0 for i in range(len(self.cur)) if i not in keep):
                self.limit = 0.0  # a published enforcer left: the next check publishes
            self.enforcers = [self.enforcers[i] for i in keep]
            self.allocated = [self.allocated[i] for i in keep]
        self.prev = [self.cur[i] if adjacent else 0.0 for i in keep]
        self.prev_n = [self.cur_n[i] if adjacent else 0.0 for i in keep]
        self.cur = [0.0] * len(keep)
        self.cur_n = [0.0] * len(keep)
        self.start = t - t % span

    def rates(self, t: int, span: int = SPAN_MS) -> list[float]:
        """Usage per second over the last `span` ms, per enforcer (in `enforcers` order): the
        older span weighted by how much of it is still inside."""
        inside = max(0.0, 1.0 - (t - self.start) / span)
        scale = 1000.0 / span
        return [(p * inside + c) * scale for p, c in zip(self.prev, self.cur)]

    def grains(self, t: int, span: int = SPAN_MS) -> list[float]:
        """What one mean request adds to `rates` over the last `span` ms, per enforcer: the
        least its usage can move by (0.0 with no request counted)."""
        inside = max(0.0, 1.0 - (t - self.start) / span)
        scale = 1000.0 / span
        out = []
        for p, c, pn, cn in zip(self.prev, self.cur, self.prev_n, self.cur_n):
            n = pn * inside + cn
            out.append((p * inside + c) / n * scale if n > 0.0 else 0.0)
        return out

    def restore(self, head: tuple[int, int, int, int, float, int],
                rows: list[tuple[int, float, float, float, float, float]]) -> None:
        """Set the state from `head()` and `rows()`."""
        self.clock, self.until, self.since, self.start, self.limit, self.next_check = head
        self.enforcers = [r[0] for r in rows]
        self.cur = [r[1] for r in rows]
        self.prev = [r[2] for r in rows]
        self.allocated = [r[3] for r in rows]
        self.cur_n = [r[4] for r in rows]
        self.prev_n = [r[5] for r in rows]

    def head(self) -> tuple[int, int, int, int, float, int]:
        return self.clock, self.until, self.since, self.start, self.limit, self.next_check

    def rows(self) -> list[tuple[int, float, float, float, float, float]]:
        return list(zip(self.enforcers, self.cur, self.prev, self.allocated, self.cur_n,
                        self.prev_n))


def is_saturated(rate: float, allocated: float, grain: float = 0.0) -> bool:
    """Whether an enforcer uses about all of its allocation (or has none yet): it wants more.

    About all is at least `SATURATED` of it, or within one request (`grain`: what a mean request
    adds to the rate, `Shares.grains`) of it. Example: allocated 67 kB/s, a client whose
    requests are 38 kB reads 38 or 76 kB/s by the span it lands in: saturated either way."""
    return allocated <= 0.0 or rate >= SATURATED * allocated or rate + grain >= allocated


def saturation(rates: list[float], allocated: list[float], grains: list[float] | None = None
               ) -> list[bool]:
    """`is_saturated` per enforcer (`grains` None: requests of no size)."""
    if grains is None:
        grains = [0.0] * len(rates)
    return [is_saturated(r, a, g) for r, a, g in zip(rates, allocated, grains)]


def allocate(limit: float, rates: list[float], allocated: list[float], elapsed_ms: int,
             halving_ms: int = HALVING_MS, saturated: list[bool] | None = None) -> list[float]:
    """Divide `limit` among enforcers by their usage `rates` and their last `allocated` limits
    (0.0: none yet; scaled to `limit` if the quota changed since), published `elapsed_ms` ago,
    an enforcer still using its allocation losing at most half of it per `halving_ms`; the
    result gives every enforcer at least the floor and adds up to `limit`, plus what `lend`
    lends (module docstring). `saturated`: `saturation`'s verdicts (None: with requests of no
    size)."""
    if saturated is None:
        saturated = saturation(rates, allocated)
    return lend(limit, rates, saturated,
                _bounded(limit, rates, allocated, saturated, elapsed_ms, halving_ms))


def lend(limit: float, rates: list[float], saturated: list[bool], out: list[float]
         ) -> list[float]:
    """`out` with what the unsaturated enforcers hold and do not use (the headroom over their
    usage, an idle one's floor) lent to the saturated ones in equal parts, at most LEND x
    `limit` in all.

    The headroom is what lets an enforcer's growth show: it keeps that. Unlent, it is quota
    nobody uses: beside a well-behaved client at a fifth of the quota (allocated a quarter), a
    greedy one is held to 0.75 of it, and the entity to 0.95. Lent, the sum of the usage is the
    quota while the unsaturated stay where they are; if they grow into their headroom it is at
    most (1 + LEND) x the quota until the next division (a check later), which takes it back.

    Example: Q = 1000, one enforcer using 200 of 250, one saturated at 750: 50 is lent, 800."""
    takers = sum(saturated)
    if not takers or takers == len(out):
        return out
    unused = sum(max(0.0, o - r) for o, r, sat in zip(out, rates, saturated) if not sat)
    lent = min(unused, LEND * limit) / takers
    return [o + lent if sat else o for o, sat in zip(out, saturated)]


def _bounded(limit: float, rates: list[float], allocated: list[float], saturated: list[bool],
             elapsed_ms: int, halving_ms: int) -> list[float]:
    """The division (`_divide`) with decreases bounded by halving per `halving_ms`; adds up
    to `limit`."""
    target = _divide(limit, rates, saturated)
    keep = 0.5 ** (max(0, elapsed_ms) / halving_ms)
    low = [min(a * keep, r * HEADROOM) for a, r in zip(allocated, rates)]
    held = [x < low[i] for i, x in enumerate(target)]
    if not any(held):
        return target
    floor = limit * FLOOR_SHARE
    others = [i for i, h in enumerate(held) if not h]
    kept = sum(lo for lo, h in zip(low, held) if h)
    budget = limit - floor * len(others)  # the others keep their floor whatever happens
    shrink = min(1.0, budget / kept)
    out = [lo * shrink if h else 0.0 for lo, h in zip(low, held)]
    rest = limit - kept * shrink - floor * len(others)  # above the others' floors
    above = sum(target[i] - floor for i in others)
    for i in others:
        out[i] = floor + (rest * (target[i] - floor) / above if above > 0.0 else rest / len(others))
    return out


def _divide(limit: float, rates: list[float], saturated: list[bool]) -> list[float]:
    """The division by usage alone (module docstring), before bounding decreases."""
    n = len(rates)
    if n == 0:
        return []
    floor = limit * FLOOR_SHARE
    if floor * n >= limit:
        return [limit / n] * n
    extra = [0.0 if s else max(0.0, r * HEADROOM - floor) for r, s in zip(rates, saturated)]
    rest = limit - floor * n
    wanted = sum(extra)
    if wanted >= rest:  # the unsaturated alone use more than there is: by their usage
        return [floor + rest * e / wanted for e in extra]
    out = [floor + e for e in extra]
    rest -= wanted
    takers = [i for i in range(n) if saturated[i]]
    if takers:
        for i in takers:
            out[i] += rest / len(takers)
        return out
    total = sum(rates)
    for i in range(n):
        out[i] += rest * rates[i] / total if total > 0.0 else rest / n
    return out


def moved(limit: float, published_limit: float, new: list[float], old: list[float]) -> bool:
    """Whether an allocation differs enough from the published one to publish it."""
    if limit != published_limit:
        return True
    for a, b in zip(new, old):
        if b <= 0.0 or abs(a - b) > THRESHOLD * limit:
            return True
    return False


def allocation_record(ts: int, entity: dict[str, Any], quota: str, limit: float,
                      window_ms: int, level: str | None, valid_until: int, enforcers: list[int],
                      limits: list[float], rates: list[float], saturated: list[bool]
                      ) -> dict[str, Any]:
    """The control-topic record of one allocation (docs/contract.md, "Allocations")."""
    return {
        "v": 1, "kind": "allocation", "ts": ts, "scope": "cluster", "entity": entity,
        "quota": quota, "limit": limit, "window_ms": window_ms, "config_level": level,
        "valid_until": valid_until, "others": limit * FLOOR_SHARE,
        "enforcers": [
            {"enforcer": e, "limit": a, "usage": r, "saturated": s}
            for e, a, r, s in zip(enforcers, limits, rates, saturated)
        ],
    }
