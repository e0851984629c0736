"""Directive subscriber: the library a broker or proxy embeds to obey `quota.directives`.

`ActiveSet` is the pure, clock-free index of the directives and allocations
`app.contract` accepts; `DirectiveSubscriber` (in `.consumer`, imported lazily so the index
stays usable without aiokafka) keeps one current from the control topic.

It may import the engine, `app.contract`, `app.kafka` and `app.signing`, so a broker embeds it
without the rest of the product.
"""

from app.contract.directives import (
    CLIENT_QUOTAS,
    FETCH_QUOTAS,
    PRODUCE_QUOTAS,
    BadDirective,
    parse_directive,
)
from app.subscriber.active_set import (
    ActiveSet,
    ConnectionDecision,
    MutationDecision,
    Throttle,
)

__all__ = [
    "ActiveSet",
    "BadDirective",
    "CLIENT_QUOTAS",
    "ConnectionDecision",
    "FETCH_QUOTAS",
    "MutationDecision",
    "PRODUCE_QUOTAS",
    "Throttle",
    "parse_directive",
]
