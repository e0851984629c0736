"""A request's throttle, from the usage measured for it: the larger of what the directives in
force say and what the local quota managers decide as they charge it.

- Produce: `producer_byte_rate` and `request_percentage`; the response keeps its data and
  carries the throttle.
- Fetch from a consumer: `consumer_byte_rate` and `request_percentage`; a throttled fetch gets an
  empty response (Kafka's `getThrottledResponse`), so when the directives throttle it its bytes
  are not charged locally. On an allocated window it is delivered, charged and muted for, as
  a Produce is (`QuotaEngine.kept_fetch`).
- Every other request: `request_percentage`.

Then the channel is muted until the throttle ends (KIP-219); muting is the caller's (a socket, a
simulated channel).
"""

from __future__ import annotations

from typing import NamedTuple

from app.contract.directives import FETCH_QUOTAS, PRODUCE_QUOTAS
from app.enforcement.sources import QuotaSources

REQUEST_QUOTAS: frozenset[str] = frozenset({"request_percentage"})


def quotas_for(api: str) -> frozenset[str]:
    """The client quotas a response of this API (Kafka's name) is throttled by."""
    if api == "Produce":
        return PRODUCE_QUOTAS
    if api == "Fetch":
        return FETCH_QUOTAS
    return REQUEST_QUOTAS


class Throttle(NamedTuple):
    """A request's throttle, and what its response carries."""

    ms: int
    #: a consumer Fetch answered empty (Kafka's `getThrottledResponse`): throttled, and not by
    #: an allocated window, which delivers it (`LocalQuotas.request`)
    empty: bool = False


class RequestQuota:
    """Client quotas (bytes in and out, request time) on the requests of one enforcer."""

    __slots__ = ("sources",)

    def __init__(self, sources: QuotaSources) -> None:
        self.sources = sources

    def throttle(self, broker: int, now: int, listener: str, user: str, client_id: str, ip: str,
                 api: str, nbytes: int, thread_ms: float, fetch: bool = False,
                 exempt: bool = False, count: int = 1) -> Throttle:
        """The throttle for a request to `broker` handled at `now`, with its measured `nbytes`
        and `thread_ms` charged to the local quota managers. `fetch`: a consumer Fetch, whose
        response is emptied when throttled; `exempt`: charged its bytes, not its time (acks=0
        Produce); `count` 0: the time of a request already counted (`LocalQuotas.request`)."""
        sources = self.sources
        ms = sources.directives.request_throttle(user, client_id, now, quotas_for(api),
                                                 broker).throttle_ms
        emptied = fetch and ms > 0  # the directives throttle it: empty, whatever the local say
        local = sources.local
        if local is not None:
            local_ms, kept = local.request(broker, now, listener, user, client_id, ip, api,
                                           0 if emptied else nbytes, thread_ms, exempt, count)
            ms = max(ms, local_ms)
            emptied = emptied or (fetch and ms > 0 and not kept)
        return Throttle(ms, emptied)
