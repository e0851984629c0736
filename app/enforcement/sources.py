"""What every enforcement decision consults: the workers' directives and the local quota
managers. One holder, so the gateway can swap in its directive subscriber once it has started
without rebuilding the decision objects that read through it."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from app.enforcement.local import LocalQuotas
from app.subscriber.active_set import ConnectionDecision, MutationDecision, Throttle


class Directives(Protocol):
    """The query side of `ActiveSet` / `DirectiveSubscriber`: `broker` names the broker the
    decision is for (a gateway holds one set for every broker behind it)."""

    def request_throttle(self, user: str, client_id: str, now: int,
                         quotas: Collection[str] | None = None,
                         broker: int | None = None) -> Throttle: ...

    def mutation(self, user: str, client_id: str, now: int, strict: bool = True,
                 broker: int | None = None) -> MutationDecision: ...

    def connection(self, ip: str, listener: str, now: int, protected_listener: bool = False,
                   broker: int | None = None) -> ConnectionDecision: ...


class QuotaSources:
    """The directives in force and the local quota managers (None: directives only)."""

    __slots__ = ("directives", "local")

    def __init__(self, directives: Directives, local: LocalQuotas | None = None) -> None:
        self.directives = directives
        self.local = local
