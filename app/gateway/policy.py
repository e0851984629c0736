"""What a broker does with a request, given the directives in force and the gateway's own
quota decisions (`LocalQuotas`): the gateway's rules in one place, pure (the directives, the local
engine and the time are passed in), so they are tested without sockets. The throttle applied is
the larger of the two sources.

- Produce: `producer_byte_rate` and `request_percentage`; the response keeps its data and carries
  the throttle; the channel is muted until it ends (KIP-219).
- Fetch from a consumer: `consumer_byte_rate` and `request_percentage`; a throttled fetch gets an
  empty response, as Kafka's `getThrottledResponse`. A follower fetch is exempt.
- CreateTopics / DeleteTopics / CreatePartitions: the controller mutation quota. A strict version
  (KIP-599: CreateTopics >= 6, DeleteTopics >= 5, CreatePartitions >= 3) under an active `reject`
  is answered THROTTLING_QUOTA_EXCEEDED without reaching the controller; otherwise it is forwarded
  and the response carries the larger of the mutation and request throttles.
- Every other request: `request_percentage`, whatever the gateway could decode of it.
- SASL requests on a SASL listener are the authenticator's, not KafkaApis': the session neither
  charges nor throttles them (`Authentication.charged`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Protocol

from app.engine.events import STRICT_SINCE
from app.gateway import apis
from app.gateway.local import LocalQuotas
from app.gateway.messages import MutationRequest
from app.subscriber.active_set import ConnectionDecision, MutationDecision, Throttle
from app.subscriber.directive import FETCH_QUOTAS, PRODUCE_QUOTAS

REQUEST_QUOTAS: frozenset[str] = frozenset({"request_percentage"})


class Directives(Protocol):
    """The query side of `ActiveSet` / `DirectiveSubscriber` for a multi-broker set."""

    def request_throttle(self, user: str, client_id: str, now: int | None = None,
                         quotas: Collection[str] | None = None,
                         broker: int | None = None) -> Throttle: ...

    def mutation(self, user: str, client_id: str, now: int | None = None, strict: bool = True,
                 broker: int | None = None) -> MutationDecision: ...

    def connection(self, ip: str, listener: str, now: int | None = None,
                   protected_listener: bool = False,
                   broker: int | None = None) -> ConnectionDecision: ...


def quotas_for(api_key: int) -> frozenset[str]:
    """The client quotas a response of this API is throttled by."""
    if api_key == apis.PRODUCE:
        return PRODUCE_QUOTAS
    if api_key == apis.FETCH:
        return FETCH_QUOTAS
    return REQUEST_QUOTAS


def is_strict(api_key: int, version: int) -> bool:
    """KIP-599: does this mutation request version reject (rather than throttle) in debt?"""
    name = apis.MUTATION_APIS[api_key]
    return version >= STRICT_SINCE[name]


def response_throttle(directives: Directives, api_key: int, user: str, client_id: str,
                      broker: int, now: int) -> int:
    """Milliseconds the directives in force put in the response (0: none). The mutation quota
    of a mutation request is planned with the request (`plan_mutation`)."""
    return directives.request_throttle(user, client_id, now, quotas_for(api_key), broker).throttle_ms


@dataclass(frozen=True)
class MutationPlan:
    """What happens to a mutation request's topics: `rejected` (indexes, answered
    THROTTLING_QUOTA_EXCEEDED with `reject_ms`, never forwarded) and the controller throttle the
    admitted ones carry (`throttle_ms`, permissive versions)."""

    rejected: frozenset[int]
    reject_ms: int
    throttle_ms: int


def plan_mutation(local: LocalQuotas | None, directives: Directives, api_key: int, version: int,
                  request: MutationRequest, charged: list[int], user: str, client_id: str,
                  broker: int, now: int) -> MutationPlan:
    """KIP-599 per topic, in request order: a strict version in debt rejects the topic (and so
    every later one, the bucket staying in debt), a permissive one admits it and throttles.
    `charged` is the partitions each topic costs. A `reject` directive in force rejects them all."""
    strict = is_strict(api_key, version)
    directive = directives.mutation(user, client_id, now, strict, broker)
    everything = frozenset(range(len(request.topics)))
    if strict and directive.reject:
        return MutationPlan(everything, max(directive.throttle_ms, 1), 0)
    rejected: set[int] = set()
    reject_ms = throttle_ms = 0
    if local is not None:
        for i, partitions in enumerate(charged):
            decision = local.mutation(broker, now, user, client_id, apis.MUTATION_APIS[api_key],
                                      version, partitions, request.validate_only)
            if decision is None:
                break  # no controller mutation quota for this principal
            if decision.action == "reject":
                rejected.add(i)
                reject_ms = max(reject_ms, decision.throttle_time_ms, 1)
            else:
                throttle_ms = max(throttle_ms, decision.throttle_time_ms)
    return MutationPlan(frozenset(rejected), reject_ms, max(throttle_ms, directive.throttle_ms))
