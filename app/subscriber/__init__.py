"""Directive subscriber: the library a broker or proxy embeds to obey `quota.directives`.

`ActiveSet` is the pure, clock-free index; `DirectiveSubscriber` (in `.consumer`, imported
lazily so the index stays usable without aiokafka) keeps one current from the control topic.

It may import the engine, `app.kafka` and `app.signing`, so a broker embeds it without the rest
of the product.
"""

from app.subscriber.active_set import (
    ActiveSet,
    ConnectionDecision,
    MutationDecision,
    Throttle,
)
from app.subscriber.directive import (
    CLIENT_QUOTAS,
    FETCH_QUOTAS,
    PRODUCE_QUOTAS,
    BadDirective,
    parse_directive,
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
