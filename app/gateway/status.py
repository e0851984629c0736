"""The gateway's HTTP port (`--metrics-port`): `/metrics` for Prometheus and `/ready` for a load
balancer or Kubernetes (200 when ready, else 503; a small JSON body says what is missing).

Served on the gateway's event loop, not a thread of its own: if the loop stops turning, both
pages stop answering, which is what a liveness probe must see, and what they report is read on
the loop that changes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["StatusServer"]


class StatusServer:
    """`/metrics` of `registry` and `/ready` from `readiness()` (its "ready" key decides)."""

    def __init__(self, registry: CollectorRegistry,
                 readiness: Callable[[], Mapping[str, bool]]) -> None:
        self.registry = registry
        self.readiness = readiness
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> None:
        """Listen on `host:port` (0: any free port); raises OSError when it cannot."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/ready", self._ready)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    @property
    def port(self) -> int:
        assert self._runner is not None
        return int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _ready(self, _request: web.Request) -> web.Response:
        state = dict(self.readiness())
        return web.json_response(state, status=200 if state.get("ready") else 503)
