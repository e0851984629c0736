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
  one of its mean requests short of it) and that throttled nobody of the entity within the
  span is *unsaturated*: it gets what it uses plus `HEADROOM`, so its usage share sets its
  allocation. A quota charges whole requests, so over a span an enforcer admits its allocation
  give or take one request: one request short is all a held client can show, whatever its
  request size (`is_saturated`);
- the rest goes to the *saturated* enforcers (using about all of their allocation, or
  throttling: a muted client uses nothing, so an enforcer that throttled reads as idle by its
  usage alone), split equally: their real demand is hidden by throttling, and the same usage
  share would hold any split forever, so max-min fairness is what moves unused share to where
  it is needed. With no saturated enforcer the rest is split by usage share among all;
- no enforcer falls below what its own window still holds, spread over that window and the
  time since the last allocation (`kept`): a limit that falls faster than the enforcer's
  window drains makes its throttles long (Kafka's formula answers what the window holds, not
  the last second), and a client muted for long reads as idle;
- the listed allocations add up to Q, plus what the unsaturated enforcers hold and do not use,
  lent to the saturated ones: at most `LEND` x Q (`lend`).

Usage is measured per enforcer over the last span (`Shares`; `SPAN_MS`, or
`EngineSettings.allocation_span_ms`), and kept for as long as the enforcers' window
(`Horizon`): Kafka's 11 x 1 s for brokers running the broker plugin (`WINDOW_MS`, or
`EngineSettings.enforcer_window_ms`), `window_num` x `allocation_sample_ms` for named gateways,
whose throttles repay a debt at the allocation and stay short whatever the window. An enforcer
stays listed while its window holds usage of the entity or it mutes the entity's clients. The
first allocation of a window waits until its usage was seen for one span (enforcers use the static
split, quota / live enforcers, until then: the one that reported first must not take the
whole quota). Allocations are re-computed at most every `CHECK_MS` of event time, before the
usage that made the check due is counted (a broker's usage comes as one event per second:
the check at a second's first event sees the last second whole), and published only when an
enforcer's allocation moved by more than `THRESHOLD` x Q, the set of enforcers changed, the
quota changed, or half of the last one's validity passed.

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
#: the least and the most an enforcer's bound is of its allocation (`trimmed`)
TRIM_MIN: Final = 0.1
TRIM_MAX: Final = 3.0
#: how far a trim moves per window, as a share of the error between what an enforcer admits and
#: its allocation (`trimmed`)
TRIM_GAIN: Final = 0.5
#: what an enforcer admitted of a fetch quota is measured over this many of its windows for
#: its trim (other quotas: one): a consumer fetching its window's worth is answered in cycles
#: longer than one (`trimmed`)
FETCH_TRIM_WINDOWS: Final = 2
#: republish when some enforcer's allocation moves by more than this share of the quota
THRESHOLD: Final = 0.1
#: usage is measured over the last span (ms of event time), unless the engine is given another
SPAN_MS: Final = 1000
#: the window an enforcer holds its allocation over (ms), unless the engine is given another:
#: Kafka's default quota window, 11 samples of 1 s, as brokers running the broker plugin hold it
WINDOW_MS: Final = 11_000
#: allocations are re-computed at most this often (ms of event time)
CHECK_MS: Final = 100
#: most enforcers one window's usage is tracked for (beyond: they share `others`)
MAX_ENFORCERS: Final = 1024
#: the shortest validity an allocation may have: two checks
MIN_VALIDITY_MS: Final = 2 * CHECK_MS
#: the longest validity an allocation may have (readers refuse a longer one: forged or broken)
MAX_VALIDITY_MS: Final = 3_600_000


#: one enforcer's part of a `Shares`, as `Shares.rows` gives it: (enforcer, cur, allocated,
#: trim, cur_n, prev_n, muted, past spans)
Row = tuple[int, float, float, float, float, float, int, tuple[float, ...]]
#: a `Shares`'s own fields, as `Shares.head` gives them: (clock, until, since, start, limit,
#: checked, published, depth)
Head = tuple[int, int, int, int, float, int, int, int]


class Shares:
    """One cluster-scope window's recent usage per enforcer and the allocation last published.

    Usage is kept per enforcer in spans of `span` ms (`SPAN_MS` by default): the current one
    (`cur`) and the `depth` before it (`past`, newest first), enough to cover what the
    enforcer's own window still holds (`held`). The last span gives the usage rate the quota
    is divided by (`rates`, a sliding estimate from the current and the last span). `muted`
    is when the throttles the enforcer answered the entity's requests with end (event time):
    a muted client uses nothing, and this is what tells a throttled enforcer from an idle one.
    `clock` and `until` (the last allocation's validity) play the same part as in `Rate`: an
    idle state with no allocation in force may be dropped.
    """

    __slots__ = ("clock", "until", "since", "start", "depth", "enforcers", "cur", "past",
                 "cur_n", "prev_n", "muted", "allocated", "trim", "limit", "checked",
                 "published")

    def __init__(self) -> None:
        self.clock = 0
        self.until = 0
        self.since = -1  # when the first usage was counted
        self.start = 0  # of the current span
        #: spans kept per enforcer before the current one
        self.depth = 1
        self.enforcers: list[int] = []
        self.cur: list[float] = []
        #: enforcer i's past spans at [i * depth, (i + 1) * depth), the last span first
        self.past: list[float] = []
        #: requests counted in `cur` and in the last span (`grains`)
        self.cur_n: list[float] = []
        self.prev_n: list[float] = []
        #: per enforcer, when the throttles it answered with end (event time; 0: none)
        self.muted: list[int] = []
        #: the last allocation per enforcer (0.0: not in it), before its trim
        self.allocated: list[float] = []
        #: per enforcer, what its bound is of its allocation (`trimmed`): published limits are
        #: `allocated` x `trim`
        self.trim: list[float] = []
        #: the quota the last allocation divided (0.0: none published, or it must be republished)
        self.limit = 0.0
        #: when the allocation was last checked, and last published (event time; -1: never)
        self.checked = -1
        self.published = -1

    def record(self, enforcer: int, value: float, t: int, span: int = SPAN_MS,
               count: int = 1, throttle_ms: int = 0, depth: int = 1) -> None:
        """Count `value` used by `count` requests on `enforcer` at `t` (event time; earlier
        times count as the latest), answered with `throttle_ms` in all, in spans of `span` ms
        keeping `depth` past spans (`advance`, then `add`)."""
        self.add(enforcer, value, self.advance(t, span, depth), count, throttle_ms)

    def advance(self, t: int, span: int, depth: int) -> int:
        """Move the clock to `t` (never back) and start the span holding it; returns the time
        the usage at `t` counts at."""
        if t < self.clock:
            t = self.clock
        self.clock = t
        if self.since < 0:
            self.since = t
        if depth != self.depth:
            self._resize(depth)
        if t >= self.start + span:
            self._roll(t, span)
        return t

    def add(self, enforcer: int, value: float, t: int, count: int, throttle_ms: int) -> None:
        """Count usage in the current span (after `advance` to `t`)."""
        enforcers = self.enforcers
        if enforcer in enforcers:
            i = enforcers.index(enforcer)
        elif len(enforcers) < MAX_ENFORCERS:
            i = len(enforcers)
            enforcers.append(enforcer)
            self.cur.append(0.0)
            self.past.extend([0.0] * self.depth)
            self.cur_n.append(0.0)
            self.prev_n.append(0.0)
            self.muted.append(0)
            self.allocated.append(0.0)
            self.trim.append(1.0)
        else:
            return
        self.cur[i] += value
        self.cur_n[i] += count
        if throttle_ms and t + throttle_ms > self.muted[i]:
            self.muted[i] = t + throttle_ms

    def _resize(self, depth: int) -> None:
        """Keep `depth` past spans per enforcer (the settings changed since the state was
        written): the newest ones, or zeros for the oldest."""
        old, past = self.depth, self.past
        self.past = [past[i * old + k] if k < old else 0.0
                     for i in range(len(self.enforcers)) for k in range(depth)]
        self.depth = depth

    def _roll(self, t: int, span: int) -> None:
        """Start the span holding `t`. The current span becomes the last one (with empty
        spans between them if `t` skipped some); an enforcer whose spans hold no usage and
        that mutes nobody is dropped: its window is empty."""
        start = t - t % span
        gap = (start - self.start) // span  # >= 1
        depth, past, cur = self.depth, self.past, self.cur
        rolled: list[float] = []
        keep: list[int] = []
        for i in range(len(self.enforcers)):
            ring = ([cur[i]] + [0.0] * (gap - 1) + past[i * depth:(i + 1) * depth])[:depth]
            if any(v > 0.0 for v in ring) or self.muted[i] > start - span:
                keep.append(i)
                rolled.extend(ring)
        if len(keep) < len(self.enforcers):
            if any(self.allocated[i] > 0.0 for i in range(len(self.enforcers)) if i not in keep):
                self.limit = 0.0  # a published enforcer left: the next check publishes
            self.enforcers = [self.enforcers[i] for i in keep]
            self.allocated = [self.allocated[i] for i in keep]
            self.trim = [self.trim[i] for i in keep]
            self.muted = [self.muted[i] for i in keep]
        self.past = rolled
        self.prev_n = [self.cur_n[i] if gap == 1 else 0.0 for i in keep]
        self.cur = [0.0] * len(keep)
        self.cur_n = [0.0] * len(keep)
        self.start = start

    def rates(self, t: int, span: int = SPAN_MS) -> list[float]:
        """Usage per second over the last `span` ms, per enforcer (in `enforcers` order): the
        last span weighted by how much of it is still inside."""
        inside = max(0.0, 1.0 - (t - self.start) / span)
        scale = 1000.0 / span
        depth, past = self.depth, self.past
        return [(past[i * depth] * inside + c) * scale for i, c in enumerate(self.cur)]

    def grains(self, t: int, span: int = SPAN_MS) -> list[float]:
        """What one mean request adds to `rates` over the last `span` ms, per enforcer: the
        least its usage can move by (0.0 with no request counted)."""
        inside = max(0.0, 1.0 - (t - self.start) / span)
        scale = 1000.0 / span
        depth, past = self.depth, self.past
        out = []
        for i, (c, pn, cn) in enumerate(zip(self.cur, self.prev_n, self.cur_n)):
            n = pn * inside + cn
            out.append((past[i * depth] * inside + c) / n * scale if n > 0.0 else 0.0)
        return out

    def held(self, t: int, window: int, span: int = SPAN_MS) -> list[float]:
        """Usage within the last `window` ms, per enforcer: what an enforcer's own window of
        that length still holds (each past span counted for the part of it inside)."""
        low = t - window
        depth, past, start = self.depth, self.past, self.start
        out = []
        for i, c in enumerate(self.cur):
            total = c
            for k in range(depth):
                end = start - k * span  # span k covers [end - span, end)
                inside = end - max(low, end - span)
                if inside <= 0:
                    break
                total += past[i * depth + k] * min(1.0, inside / span)
            out.append(total)
        return out

    def throttled(self, t: int, within: int = 2 * SPAN_MS) -> list[bool]:
        """Per enforcer, whether it muted the entity's clients within the last `within` ms
        (`Horizon.muting`)."""
        since = t - within
        return [m > since for m in self.muted]

    def bounds(self) -> list[float]:
        """The bounds the last allocation gave the enforcers (their trimmed allocations)."""
        return [a * k for a, k in zip(self.allocated, self.trim)]

    def restore(self, head: Head, rows: list[Row]) -> None:
        """Set the state from `head()` and `rows()`."""
        (self.clock, self.until, self.since, self.start, self.limit, self.checked,
         self.published, self.depth) = head
        self.enforcers = [r[0] for r in rows]
        self.cur = [r[1] for r in rows]
        self.allocated = [r[2] for r in rows]
        self.trim = [r[3] for r in rows]
        self.cur_n = [r[4] for r in rows]
        self.prev_n = [r[5] for r in rows]
        self.muted = [r[6] for r in rows]
        self.past = [v for r in rows for v in r[7]]

    def head(self) -> Head:
        return (self.clock, self.until, self.since, self.start, self.limit, self.checked,
                self.published, self.depth)

    def rows(self) -> list[Row]:
        depth = self.depth
        return [(e, self.cur[i], self.allocated[i], self.trim[i], self.cur_n[i],
                 self.prev_n[i], self.muted[i], tuple(self.past[i * depth:(i + 1) * depth]))
                for i, e in enumerate(self.enforcers)]


class Horizon:
    """What one kind of enforcer (`broker`: a broker, else a named gateway) holds its
    allocations over: its window, and the past spans a window's `Shares` keeps per enforcer
    for it (enough to cover the window, and for a fetch quota the `FETCH_TRIM_WINDOWS` its trim
    is measured over); `trimmed`: whether its bounds are trimmed (`trimmed`); `muting`: how
    long after a mute ended it still counts as muting (`Shares.throttled`).

    A broker mutes by Kafka's formula for seconds and admits more or less than its bound, and
    its usage comes once a second stamped with the second's start, so a mute counts until a
    span after the span it ended in. A gateway's throttle repays a debt, so what it admits is
    its allocation (a trim measured over its short window would only follow the requests'
    lumps); its throttles are short and its usage comes as it happens, so it is muting only
    while a mute lasts (counted longer, a gateway its traffic left keeps its share, and a
    move of the load between gateways settles that much later)."""

    __slots__ = ("window_ms", "depth", "fetch_depth", "trimmed", "muting")

    def __init__(self, window_ms: int, span_ms: int, broker: bool) -> None:
        self.window_ms = window_ms
        self.trimmed = broker
        self.muting = (2 if broker else 0) * span_ms
        self.depth = -(-window_ms // span_ms)
        self.fetch_depth = -(-FETCH_TRIM_WINDOWS * window_ms // span_ms)


def is_saturated(rate: float, allocated: float, grain: float = 0.0) -> bool:
    """Whether an enforcer uses about all of its allocation (or has none yet): it wants more.

    About all is at least `SATURATED` of it, or within one request (`grain`: what a mean request
    adds to the rate, `Shares.grains`) of it. Example: allocated 67 kB/s, a client whose
    requests are 38 kB reads 38 or 76 kB/s by the span it lands in: saturated either way."""
    return allocated <= 0.0 or rate >= SATURATED * allocated or rate + grain >= allocated


def saturation(rates: list[float], allocated: list[float], grains: list[float] | None = None,
               throttled: list[bool] | None = None) -> list[bool]:
    """`is_saturated` per enforcer (`grains` None: requests of no size); an enforcer that
    throttled the entity within the span (`throttled`, `Shares.throttled`) is saturated
    whatever it used: its clients were muted, their demand hidden."""
    if grains is None:
        grains = [0.0] * len(rates)
    out = [is_saturated(r, a, g) for r, a, g in zip(rates, allocated, grains)]
    if throttled is not None:
        out = [s or m for s, m in zip(out, throttled)]
    return out


def kept(held: list[float], allocated: list[float], window_ms: int, elapsed_ms: int
         ) -> list[float]:
    """The least each enforcer keeps of its allocation, `elapsed_ms` after the last one: what
    its window still holds (`Shares.held`, over the enforcers' window of `window_ms`) spread
    over that window and the time since, and never more than it was allocated.

    An enforcer measures a rate as what its window holds over the window: O = C/W. Kafka's
    formula answers O over a limit A with X = (O - A)/A x W = C/A - W, so an allocation that
    falls to A = C/(W + e) throttles for e, the time since the last allocation, and a client
    that comes back to an enforcer whose window still holds its past usage is throttled for
    no longer either. Falls faster than the window drains would mute for far longer (a third
    of a quota cut to the floor over Kafka's 11 s window: 62 s), and a muted client uses
    nothing, which reads as less demand still. An enforcer whose traffic left is released as
    its window drains, linearly over the window.

    Example: a broker held 300 kB/s over Kafka's 11 x 1 s window (C = 3.3 MB): 1 s later it
    keeps at least 3.3 MB / 12 s = 275 kB/s, a throttle of 1 s at most."""
    scale = 1000.0 / (window_ms + max(elapsed_ms, 0))
    return [min(a, h * scale) for h, a in zip(held, allocated)]


def trimmed(trim: list[float], admitted: list[float], allocated: list[float],
            saturated: list[bool], window_ms: int, elapsed_ms: int) -> list[float]:
    """Each enforcer's bound as a share of its allocation, so that what it admits is its
    allocation: while it is saturated, moved by `TRIM_GAIN` x (allocation - admitted) /
    allocation per window of `window_ms` (`admitted`: per second, over one window, or
    `FETCH_TRIM_WINDOWS` of a fetch quota), else back towards 1 at that pace; within
    [`TRIM_MIN`, `TRIM_MAX`].

    Kafka's formula holds a bound over its window for one connection and for requests small
    against the window; real clients are neither. X = (O - T)/T x W mutes the connection that
    sent the request: a client with several connections to one broker (two producers of one
    client id, say) sends on the others meanwhile, each muted alone, and with requests that
    are a large part of what the window holds (a backlog of 1 MB requests against 350 kB/s: a
    quarter of an 11 s window) the broker admits 1.1-1.7x its bound. A consumer is the other
    way: a throttled fetch is answered empty and its bytes taken back, so a consumer whose
    fetches are its window's worth (Kafka caps a fetch at (N - 1) samples of the bound, and
    librdkafka asks for more) gets one when its window is empty: one every two mutes, about
    half its bound, in a cycle longer than the window (hence two windows to measure it, and a
    bound that may reach 3x its allocation: one fetch in a cycle of ~20 s). The
    workers see what each admits and move its bound until it admits its allocation. The step
    follows the error, not the ratio: what an enforcer admits is lumpy (a request at a time),
    and a ratio's average would settle above the allocation.

    Example: an enforcer allocated 175 kB/s admits 250 kB/s: a window later its bound is
    175 x (1 + 0.5 x (175 - 250) / 175) = 137.5 kB/s."""
    step = TRIM_GAIN * min(1.0, max(elapsed_ms, 0) / window_ms)
    out = []
    for k, r, a, sat in zip(trim, admitted, allocated, saturated):
        if sat and a > 0.0:
            k *= 1.0 + step * min(1.0, max(-0.5, (a - r) / a))
        else:
            k += (1.0 - k) * step
        out.append(min(TRIM_MAX, max(TRIM_MIN, k)))
    return out


def allocate(limit: float, rates: list[float], allocated: list[float], keep: list[float],
             saturated: list[bool] | None = None) -> list[float]:
    """Divide `limit` among enforcers by their usage `rates` and their last `allocated` limits
    (0.0: none yet), each keeping at least `keep` (`kept`); the result gives every enforcer
    at least the floor and adds up to `limit`, plus what `lend` lends (module docstring).
    `saturated`: `saturation`'s verdicts (None: with requests of no size)."""
    if saturated is None:
        saturated = saturation(rates, allocated)
    return lend(limit, rates, saturated, _bounded(limit, rates, keep, saturated))


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


def _bounded(limit: float, rates: list[float], keep: list[float], saturated: list[bool]
             ) -> list[float]:
    """The division (`_divide`) with every enforcer keeping at least `keep`; adds up to
    `limit`."""
    target = _divide(limit, rates, saturated)
    held = [x < keep[i] for i, x in enumerate(target)]
    if not any(held):
        return target
    floor = limit * FLOOR_SHARE
    others = [i for i, h in enumerate(held) if not h]
    kept_sum = sum(k for k, h in zip(keep, held) if h)
    budget = limit - floor * len(others)  # the others keep their floor whatever happens
    shrink = min(1.0, budget / kept_sum)
    out = [k * shrink if h else 0.0 for k, h in zip(keep, held)]
    rest = limit - kept_sum * shrink - floor * len(others)  # above the others' floors
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
                      limits: list[float], rates: list[float], saturated: list[bool],
                      trims: list[float]) -> dict[str, Any]:
    """The control-topic record of one allocation (docs/contract.md, "Allocations"): each
    enforcer's allocation (`limit`) and its `trim`; it holds the two's product."""
    return {
        "v": 1, "kind": "allocation", "ts": ts, "scope": "cluster", "entity": entity,
        "quota": quota, "limit": limit, "window_ms": window_ms, "config_level": level,
        "valid_until": valid_until, "others": limit * FLOOR_SHARE,
        "enforcers": [
            {"enforcer": e, "limit": a, "usage": r, "saturated": s, "trim": k}
            for e, a, r, s, k in zip(enforcers, limits, rates, saturated, trims)
        ],
    }
