"""Kafka's quota managers on an enforcer's own traffic (a gateway's, a simulated broker's): the
engine as one more driver.

A broker decides every request's throttle as it handles it; directives from the workers arrive a
loop later (~100 ms), and a fast client does a lot in 100 ms: a consumer with a backlog fetched
6 MB before the first directive reached the gateway, then sat out a 27 s throttle. So the
gateway also runs the project's engine itself, in broker scope with Kafka's accounting, on the
requests and connections it handles, with the quotas of the config topic: for the traffic
through one gateway that is exactly what the broker behind it would decide, request by request.
The workers' directives then add what this gateway cannot see (the other gateways in front of
the same broker, and in cluster scope the other brokers); the gateway applies the larger of the
two. Local decisions are never stricter than the broker's own would be for the same traffic.

In cluster scope with allocations, the limit of a client quota window is the enforcer's
allocation (`AllocatedLimits`): a named gateway (`gateway`) holds its own share over all the
brokers behind it, an unnamed one each broker's share; request by request, and the workers
publish no throttle directives for those quotas.

Pure like the engine: times come from the caller.
"""

from __future__ import annotations

from dataclasses import replace

from app.engine import configs as cfg
from app.engine.configs import QuotaConfigs
from app.engine.engine import Decision, EngineSettings, QuotaEngine
from app.engine.events import ConnectionEvent, MutationEvent, RequestEvent
from app.engine.kafka_math import UNLIMITED
from app.subscriber.allocations import AllocatedLimits

__all__ = ["FETCH_CAP_SHARE", "LocalQuotas", "broker_settings"]

#: A consumer's fetch asks for at most 1/FETCH_CAP_SHARE of what its quota allows in a window.
FETCH_CAP_SHARE = 50


def broker_settings(workers: EngineSettings) -> EngineSettings:
    """An enforcer's own quota managers: the workers' windows, grace and expiry, decided as one
    broker decides (broker scope, Kafka's accounting; allocations come from the workers)."""
    return replace(workers, scope="broker", accounting="kafka", allocations=False)


class LocalQuotas:
    """The engine over one gateway's requests, decision by decision."""

    def __init__(self, settings: EngineSettings, configs: QuotaConfigs | None = None,
                 gateway: int = -1) -> None:
        """`gateway`: this gateway's id when gateways are named (-1: none)."""
        if settings.scope != "broker" or settings.accounting != "kafka":
            raise ValueError("local quotas are a broker's: broker scope, kafka accounting")
        self.engine = QuotaEngine(settings, configs)
        self.gateway = gateway

    def obey(self, limits: AllocatedLimits) -> None:
        """Enforce allocations from now on (cluster scope): each client quota window's limit is
        this enforcer's allocation, or the static split without one."""
        self.engine.limits = limits

    @property
    def configs(self) -> QuotaConfigs:
        return self.engine.configs

    @property
    def configs_version(self) -> int:
        """Changes whenever a config is added: what was derived from the configs is stale."""
        return self.engine.timeline.version

    def limited(self, user: str, client_id: str) -> bool:
        """Whether any client quota (bytes in or out, request time) applies to this principal."""
        configs = self.engine.configs
        for quota in (cfg.PRODUCE, cfg.FETCH, cfg.REQUEST):
            res = configs.resolve(quota, user, client_id)
            if res is not None and res.limit < UNLIMITED:
                return True
        return False

    def request(self, broker: int, ts: int, listener: str, user: str, client_id: str, ip: str,
                api: str, nbytes: int, thread_ms: float, exempt: bool,
                count: int = 1) -> tuple[int, bool]:
        """Record one request; the throttle Kafka would answer it with (0: none), and whether a
        throttled Fetch is still delivered. A throttled Fetch's bytes are taken back, as the
        broker sends an empty response instead, but on an allocated window, which delivers it
        and keeps them (`QuotaEngine.kept_fetch`). `count` 0: the time of a request already
        counted (a Produce whose bytes were charged as it was forwarded)."""
        engine = self.engine
        event = RequestEvent(ts, broker, listener, user, client_id, ip, api, nbytes, thread_ms,
                             0.0, exempt, count, self.gateway)
        decisions, _ = engine.process(event)
        engine.expire_due(ts)  # idle principals leave memory
        return (max((d.throttle_time_ms for d in decisions), default=0),
                api == "Fetch" and engine.kept_fetch)

    def fetch_cap(self, broker: int, user: str, client_id: str) -> int | None:
        """Most bytes a Fetch from this principal to `broker` may return, or None (no consumer
        quota).

        Kafka caps a consumer's fetch at what its quota allows in a window (`KafkaApis`:
        `getMaxValueInQuotaWindow` = limit x (N-1) x W), so one response never exceeds the
        window by itself: it would be throttled, sent empty, and fetched again forever. The
        gateway asks for a fiftieth of that, of the enforcer's allocation over its short
        samples when it holds one. A broker returns a whole first record batch past
        `max_bytes` (the session cuts the partial ones after it: `messages.whole_batches`); and
        a throttled fetch returns nothing for its whole mute, so a greedy consumer gets less
        than its quota the larger its fetches are. With the engine
        (11 x 500 ms windows, 3 ms round trips), fetches of the window's whole allowance get
        50% of the quota, a tenth of it 90%, a fiftieth 96%. At the quota that is 50 fetches
        per window, 5/s with Kafka's default windows.
        """
        enforcer = self.gateway if self.gateway >= 0 else broker
        held = self.engine.allowance(cfg.FETCH, enforcer, user, client_id)
        return None if held is None else max(1, int(held / FETCH_CAP_SHARE))

    def mutation(self, broker: int, ts: int, user: str, client_id: str, api: str,
                 api_version: int, partitions: int, validate_only: bool) -> Decision | None:
        """One topic of a mutation request, in request order: `action` "reject" (strict, in
        debt: not admitted, nothing charged), "throttle" (permissive, charged) or "none".
        None when no controller mutation quota applies."""
        event = MutationEvent(ts, broker, user, client_id, api, api_version, partitions,
                              validate_only)
        decisions, _ = self.engine.process(event)
        return decisions[0] if decisions else None

    def connection(self, broker: int, ts: int, listener: str, ip: str,
                   inter_broker: bool = False) -> tuple[int, int]:
        """A new connection: (delay_ms for the acceptor, close_ms for the IP; 0 each: none)."""
        decisions, _ = self.engine.process(ConnectionEvent(ts, broker, listener, ip, inter_broker))
        delay = max((d.throttle_time_ms for d in decisions if d.action == "delay_connection"),
                    default=0)
        close = max((d.throttle_time_ms for d in decisions if d.action == "close_connection"),
                    default=0)
        return delay, close
