"""Request samples as columns: what a batch of `RequestEvent`s holds, one list per field.

The hot path moves request samples in these, never one object per sample: the intake decodes
a columnar record (or validates JSON) into them, the ingest splits them by route, and
`QuotaEngine.process_requests` runs over them. Strings (listener, user, client id, IP, API)
are indices into `names`, the batch's string dictionary: a batch of a few hundred samples
names a few dozen principals. Times are whole nanoseconds (`engine.nanos`), the unit Kafka's
request quota counts, so the columns hold integers only.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable

from app.engine.events import RequestEvent


def _one(i: int) -> Callable[[list[int]], tuple[int]]:
    """`itemgetter` of one index, as a 1-tuple like that of several."""
    def pick(values: list[int]) -> tuple[int]:
        return (values[i],)
    return pick


#: every column's name
COLUMNS = ("ts", "broker", "gateway", "listener", "user", "client_id", "ip", "api", "bytes",
           "thread_ns", "network_ns", "exempt", "count", "throttle_ms", "arrival", "only")


class RequestColumns:
    """Column lists of equal length, plus the string dictionary their name columns index.

    `arrival` is each row's source record's Kafka timestamp (the config rule's arrival),
    `only` the quota types to process (`engine.PRODUCE_BIT`...; 0: all): both are set by the
    intake, not by the record's writer.
    """

    __slots__ = ("names", "ts", "broker", "gateway", "listener", "user", "client_id", "ip",
                 "api", "bytes", "thread_ns", "network_ns", "exempt", "count", "throttle_ms",
                 "arrival", "only", "_index")

    def __init__(self, names: list[str] | None = None) -> None:
        self.names: list[str] = [] if names is None else names
        self.ts: list[int] = []
        self.broker: list[int] = []
        self.gateway: list[int] = []
        self.listener: list[int] = []
        self.user: list[int] = []
        self.client_id: list[int] = []
        self.ip: list[int] = []
        self.api: list[int] = []
        self.bytes: list[int] = []
        self.thread_ns: list[int] = []
        self.network_ns: list[int] = []
        self.exempt: list[int] = []
        self.count: list[int] = []
        #: the throttle each row was answered with (ms, summed over its `count` requests)
        self.throttle_ms: list[int] = []
        self.arrival: list[int] = []
        self.only: list[int] = []
        #: name -> index in `names`, built on the first `name` call
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.ts)

    def column(self, name: str) -> list[int]:
        return getattr(self, name)  # type: ignore[no-any-return]

    def set_column(self, name: str, values: list[int]) -> None:
        setattr(self, name, values)

    def name(self, text: str) -> int:
        """The index of `text` in the dictionary, added if new."""
        index = self._index
        if index is None:
            index = self._index = {n: i for i, n in enumerate(self.names)}
        i = index.get(text)
        if i is None:
            i = index[text] = len(self.names)
            self.names.append(text)
        return i

    def append(self, ts: int, broker: int, gateway: int, listener: str, user: str,
               client_id: str, ip: str, api: str, nbytes: int, thread_ns: int,
               network_ns: int, exempt: bool, count: int, arrival: int, only: int,
               throttle_ms: int = 0) -> None:
        self.ts.append(ts)
        self.broker.append(broker)
        self.gateway.append(gateway)
        self.listener.append(self.name(listener))
        self.user.append(self.name(user))
        self.client_id.append(self.name(client_id))
        self.ip.append(self.name(ip))
        self.api.append(self.name(api))
        self.bytes.append(nbytes)
        self.thread_ns.append(thread_ns)
        self.network_ns.append(network_ns)
        self.exempt.append(1 if exempt else 0)
        self.count.append(count)
        self.throttle_ms.append(throttle_ms)
        self.arrival.append(arrival)
        self.only.append(only)

    def extend_rows(self, source: RequestColumns, rows: list[int], only: list[int] | None
                    ) -> None:
        """Append the given rows of `source` in order, their names added to this dictionary;
        `only`: each row's quota types (None: all, for every row).

        Values are picked by `itemgetter` (C) and moved as objects: read as integers and
        written back, each would be unboxed and boxed again, a new object per value."""
        if not rows:
            return
        pick = itemgetter(*rows) if len(rows) > 1 else _one(rows[0])
        names = source.names
        # a source name's index here, as the object to append (None: not looked up yet; an
        # identity test, where `< 0` on an object would be a generic comparison)
        remap: list[Any] = [None] * len(names)
        for mine, theirs in ((self.listener, source.listener), (self.user, source.user),
                             (self.client_id, source.client_id), (self.ip, source.ip),
                             (self.api, source.api)):
            for k in pick(theirs):
                m = remap[k]
                if m is None:
                    m = remap[k] = self.name(names[k])
                mine.append(m)
        for mine, theirs in ((self.ts, source.ts), (self.broker, source.broker),
                             (self.gateway, source.gateway), (self.bytes, source.bytes),
                             (self.thread_ns, source.thread_ns),
                             (self.network_ns, source.network_ns), (self.exempt, source.exempt),
                             (self.count, source.count), (self.throttle_ms, source.throttle_ms),
                             (self.arrival, source.arrival)):
            mine.extend(pick(theirs))
        self.only.extend([0] * len(rows) if only is None else only)

    def event(self, i: int) -> RequestEvent:
        """Row `i` as an event (for a reader that shows one, not for the hot path); times
        back in ms."""
        names = self.names
        return RequestEvent(self.ts[i], self.broker[i], names[self.listener[i]],
                            names[self.user[i]], names[self.client_id[i]], names[self.ip[i]],
                            names[self.api[i]], self.bytes[i], self.thread_ns[i] / 1e6,
                            self.network_ns[i] / 1e6, self.exempt[i] != 0, self.count[i],
                            self.gateway[i], self.throttle_ms[i])
