"""The gateway's HTTP port: `/ready` (what a Kubernetes readiness probe or a load balancer asks)
and `/metrics`, and what decides readiness."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter

from app.gateway.server import Gateway
from app.gateway.status import StatusServer
from app.subscriber.active_set import ActiveSet
from tests.unit.loopback import FakeBroker, cluster_of, loopback_config


class Directives(ActiveSet):
    """Directives whose rebuild from the control topic is finished, or not."""

    def __init__(self, ready: bool) -> None:
        super().__init__(None)
        self.is_ready = ready


class Reader:
    """A supervised reader, running or crashed."""

    def __init__(self, healthy: bool) -> None:
        self.healthy = healthy

    async def stop(self) -> None:
        pass


@pytest.fixture
async def broker() -> AsyncIterator[FakeBroker]:
    broker = FakeBroker()
    await broker.start()
    yield broker
    await broker.stop()


async def test_ready_only_when_listening_with_the_directives_read_and_readers_running(
        broker: FakeBroker) -> None:
    gateway = Gateway(loopback_config(broker), directives=Directives(ready=True))
    assert gateway.readiness()["ready"] is False  # not listening yet
    await gateway.serve(cluster_of(broker))
    try:
        # the loopback gateway has no broker ports (`max_nodes=0`): a warning, still ready
        assert gateway.readiness() == {"listening": True, "directives_ready": True,
                                       "configs_ready": True, "readers_healthy": True,
                                       "draining": False, "all_brokers_fronted": False,
                                       "ready": True}
        gateway.directives.is_ready = False
        assert gateway.readiness()["ready"] is False
        gateway.directives.is_ready = True
        gateway._publisher_loop = Reader(healthy=False)  # type: ignore[assignment]
        assert gateway.readiness()["readers_healthy"] is False
        assert gateway.readiness()["ready"] is False
        gateway._publisher_loop = None
        gateway.drain()
        assert gateway.readiness()["ready"] is False
        assert gateway.readiness()["listening"] is False
    finally:
        await gateway.stop()


async def test_ready_answers_200_or_503_with_what_is_missing_and_metrics_are_served() -> None:
    state = {"listening": True, "ready": True}
    registry = CollectorRegistry()
    Counter("probe_checks", "a counter", registry=registry).inc()
    server = StatusServer(registry, lambda: state)
    await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{server.port}"
            async with http.get(f"{base}/ready") as answer:
                assert (answer.status, await answer.json()) == (200, state)
            state.update(listening=False, ready=False)
            async with http.get(f"{base}/ready") as answer:
                assert (answer.status, await answer.json()) == (503, state)
            async with http.get(f"{base}/metrics") as answer:
                assert answer.status == 200
                assert "probe_checks_total 1.0" in await answer.text()
            async with http.get(f"{base}/other") as answer:
                assert answer.status == 404
    finally:
        await server.stop()
