"""Quota configs on event time: which configs an event is routed and judged by.

The rule, for every driver (the live workers and gateways, `replay`, the audit, `explain`, the
simulator): a config update is in force for an event when

    update.ts <= event.ts                      (it took effect by the event's time), and
    update.arrival - grace/2 <= event.arrival  (it was in Kafka by the time the event was),

whatever order a driver happens to read configs and events in. `arrival` is the Kafka record
timestamp of the config record and of the event's source record; input without one (a file
given to `replay`) has none, and then only the first condition counts. This is a versioned
table joined as of each record's time (Kafka Streams' versioned stores, KIP-889/KIP-914),
with the second condition for configs that reach Kafka late.

Why the second condition: a live worker judges an event only once it has read the config
topic to its end at the event's arrival plus the grace (`ConfigFollower.wait_confirmed`), so
every config written before then is known, and one written later is not, even though its
`ts` may be older (a late config): it then takes effect from its arrival, not retroactively.
Both timestamps are in Kafka, so the audit computes the same answer. For a stream read as it
happens, arrival is close to `ts` and the rule is "configs with ts <= t"; for a file of old
events sent with `quota-streams produce` (configs first), every config arrived first and the
rule is the same.

Pure and clock-free, like the engine.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Iterator

from app.engine.configs import ConfigUpdate, QuotaConfigs

#: Snapshots kept at once (a live stream moves between two or three; replay of a file between
#: the stretches its configs cut it into).
MAX_SNAPSHOTS = 16
#: Before and after every time and arrival. Both fit a compiled module's unboxed integers
#: (|x| < 2**62), so comparing a time with them costs a machine instruction; `END`, the upper
#: bound of a stretch no config ends, lies past FOREVER so that input without an arrival
#: (FOREVER) is still inside it.
NEVER = -(2**61)
FOREVER = 2**61
END = 2**62 - 1


class Snapshot:
    """The configs in force for events with `t0 <= ts < t1` and `a0 <= arrival < a1`.

    `id` names them: equal ids, same configs (a cache of what was derived from them is good).
    """

    __slots__ = ("configs", "t0", "t1", "a0", "a1", "id", "members")

    def __init__(self, configs: QuotaConfigs, t0: int, t1: int, a0: int, a1: int,
                 ident: tuple[int, int, int], members: list[int]) -> None:
        self.configs = configs
        self.t0 = t0
        self.t1 = t1
        self.a0 = a0
        self.a1 = a1
        self.id = ident
        self.members = members  # the positions (in `_order`) of the updates applied, sorted


class ConfigTimeline:
    """Every config update with its time and arrival; the configs in force for any event.

    Updates in force apply in (ts, order added) order: for equal `ts`, the order a driver read
    them in (a partition's offsets, a file's lines). `at` is cheap for events in the same
    stretch between two changes, as events mostly are.
    """

    def __init__(self, initial: QuotaConfigs | None = None, grace_ms: int = 0) -> None:
        self._initial = initial if initial is not None else QuotaConfigs()
        self.grace_ms = grace_ms
        #: (ts, sequence, known from: arrival - grace/2 or NEVER, update), sorted
        self._order: list[tuple[int, int, int, ConfigUpdate]] = []
        self._ts: list[int] = []  # sorted
        self._known: list[int] = []  # sorted
        self._snapshots: dict[tuple[int, int], Snapshot] = {}
        self._last: Snapshot | None = None
        #: bumped on every `add`: a cache of anything derived from configs keys on it
        self.version = 0

    def __len__(self) -> int:
        return len(self._order)

    def forget_resolutions(self) -> None:
        """Drop every snapshot's cached resolutions (`QuotaConfigs.forget_resolutions`)."""
        self._initial.forget_resolutions()
        for snapshot in self._snapshots.values():
            snapshot.configs.forget_resolutions()
        if self._last is not None:
            self._last.configs.forget_resolutions()

    def add(self, update: ConfigUpdate, arrival: int | None = None) -> bool:
        """A config update; `arrival` is its record's Kafka timestamp (None: read from a file).
        Returns True if it arrived late: it takes effect from its arrival, not its `ts`."""
        known = NEVER if arrival is None else arrival - self.grace_ms // 2
        insort(self._order, (update.ts, len(self._order), known, update))
        insort(self._ts, update.ts)
        insort(self._known, known)
        self._snapshots.clear()
        self._last = None
        self.version += 1
        return known > update.ts

    def at(self, t: int, arrival: int = FOREVER) -> Snapshot:
        """The configs in force for an event at time `t` whose record arrived at `arrival`."""
        last = self._last
        if last is not None and last.t0 <= t < last.t1 and last.a0 <= arrival < last.a1:
            return last
        i, j = bisect_right(self._ts, t), bisect_right(self._known, arrival)
        found = self._snapshots.get((i, j))
        if found is None:
            found = self._build(i, j)
        self._last = found
        return found

    @property
    def latest(self) -> QuotaConfigs:
        """The configs once every update took effect (for tools that show what is set)."""
        return self.at(FOREVER - 1, FOREVER - 1).configs

    def entries(self) -> list[tuple[int, int, ConfigUpdate]]:
        """(ts, known from, update) in the order they apply."""
        return [(ts, known, update) for ts, _, known, update in self._order]

    def states(self, max_updates: int = 48) -> Iterator[QuotaConfigs] | None:
        """Every configs an event can be judged by (a superset: each distinct set of updates
        in force, maybe more), for checks over all of them; None when there are too many to
        list (updates far out of order and more than `max_updates`): assume any.

        A yielded object may be changed by the next step: read it, do not keep it.
        """
        known = [k for _, _, k, _ in self._order]
        if all(a <= b for a, b in zip(known, known[1:])):
            # arrival order = time order: every set in force is a prefix of the time order
            return self._prefixes()
        if len(self._order) > max_updates:
            return None
        return (self._build(i, j).configs
                for i in range(len(self._ts) + 1) for j in range(len(self._known) + 1))

    def _prefixes(self) -> Iterator[QuotaConfigs]:
        configs = self._initial.copy()
        yield configs
        for entry in self._order:
            configs.apply(entry[3])
            yield configs

    def _build(self, i: int, j: int) -> Snapshot:
        """The snapshot of the updates with ts <= _ts[i-1] and known from <= _known[j-1].

        Built on the last snapshot when its updates are exactly the first of these in apply
        order (a stream moving forward); else from the initial configs.
        """
        order, ts, known = self._order, self._ts, self._known
        t_hi = ts[i - 1] if i else NEVER - 1
        k_hi = known[j - 1] if j else NEVER - 1
        members = [p for p in range(bisect_right(order, (t_hi, FOREVER))) if order[p][2] <= k_hi]
        base = self._last
        n = len(base.members) if base is not None else 0
        if base is not None and base.id[0] == self.version and members[:n] == base.members \
                and (n == 0 or len(members) == n or members[n] > base.members[-1]):
            configs = base.configs.copy()
            fresh = members[n:]
        else:
            configs = self._initial.copy()
            fresh = members
        for p in fresh:
            configs.apply(order[p][3])
        snapshot = Snapshot(
            configs, ts[i - 1] if i else NEVER, ts[i] if i < len(ts) else END,
            known[j - 1] if j else NEVER, known[j] if j < len(known) else END,
            (self.version, i, j), members)
        if len(self._snapshots) >= MAX_SNAPSHOTS:
            del self._snapshots[next(iter(self._snapshots))]
        self._snapshots[(i, j)] = snapshot
        return snapshot
