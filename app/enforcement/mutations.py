"""The controller mutation quota (KIP-599) on one CreateTopics / DeleteTopics / CreatePartitions
request, topic by topic in request order, and the events of the topics the controller admitted.

A strict version (CreateTopics >= 6, DeleteTopics >= 5, CreatePartitions >= 3) in debt rejects
the topic, THROTTLING_QUOTA_EXCEEDED, without reaching the controller and without being charged
(and so every later topic, the bucket staying in debt); an older, permissive version admits it,
charges it and throttles the response. A `reject` directive in force rejects a strict request's
topics all at once; a `throttle` directive throttles what is admitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.enforcement.sources import QuotaSources
from app.engine.events import STRICT_SINCE
from app.usage.recorder import UsageRecorder


def is_strict(api: str, version: int) -> bool:
    """Does this mutation request version (Kafka's API name) reject, rather than throttle, in
    debt?"""
    return version >= STRICT_SINCE[api]


@dataclass(frozen=True)
class MutationPlan:
    """What happens to a mutation request's topics: `rejected` (indexes, answered
    THROTTLING_QUOTA_EXCEEDED with `reject_ms`, never forwarded) and the controller throttle the
    admitted ones carry (`throttle_ms`)."""

    rejected: frozenset[int]
    reject_ms: int
    throttle_ms: int

    def response_ms(self) -> int:
        """The throttle of the request's response: the larger of the two."""
        return max(self.throttle_ms, self.reject_ms if self.rejected else 0)


class MutationQuota:
    """The controller mutation quota on the mutation requests of one enforcer."""

    __slots__ = ("sources", "usage")

    def __init__(self, sources: QuotaSources, usage: UsageRecorder) -> None:
        self.sources = sources
        self.usage = usage

    def plan(self, broker: int, now: int, user: str, client_id: str, api: str, version: int,
             charged: Sequence[int], validate_only: bool = False) -> MutationPlan:
        """Decide each topic of a request at `now`; `charged` is the partitions each costs, in
        request order."""
        strict = is_strict(api, version)
        directive = self.sources.directives.mutation(user, client_id, now, strict, broker)
        if strict and directive.reject:
            return MutationPlan(frozenset(range(len(charged))), max(directive.throttle_ms, 1), 0)
        rejected: set[int] = set()
        reject_ms = throttle_ms = 0
        local = self.sources.local
        if local is not None:
            for i, partitions in enumerate(charged):
                decision = local.mutation(broker, now, user, client_id, api, version, partitions,
                                          validate_only)
                if decision is None:
                    break  # no controller mutation quota for this principal
                if decision.action == "reject":
                    rejected.add(i)
                    reject_ms = max(reject_ms, decision.throttle_time_ms, 1)
                else:
                    throttle_ms = max(throttle_ms, decision.throttle_time_ms)
        return MutationPlan(frozenset(rejected), reject_ms, max(throttle_ms, directive.throttle_ms))

    def admitted(self, broker: int, now: int, user: str, client_id: str, api: str, version: int,
                 partitions: Iterable[int], validate_only: bool = False) -> None:
        """One mutation event per topic the controller admitted, with the partitions it
        charges (a rejected topic is no event: Kafka never charged it)."""
        for count in partitions:
            self.usage.mutation(broker, now, user, client_id, api, version, count, validate_only)
