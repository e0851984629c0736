"""The console's pages on a worker's Faust web server: the page and its assets (packaged with
the code, nothing from a CDN), and the JSON API the page reads."""

from __future__ import annotations

from importlib import resources
from typing import Any

import faust
import orjson
from faust.web import View

from app.console.service import Console

#: every answer: nothing from elsewhere, no framing, no sniffing; the page renders names as
#: text, and this policy refuses inline script should one ever slip through
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                               "base-uri 'none'; frame-ancestors 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}
MAX_BODY = 64 * 1024


def asset(name: str) -> bytes:
    return resources.files("app.console").joinpath("static").joinpath(name).read_bytes()


def install(app: faust.App, console: Console) -> None:
    """Register /console and /console/api/* on the worker's web server."""

    def answer(web: Any, status: int, body: Any) -> Any:
        return web.bytes(orjson.dumps(body), content_type="application/json", status=status,
                         headers=dict(SECURITY_HEADERS))

    class Page(View):
        async def get(self, request: Any) -> Any:
            return self.bytes(asset("index.html"), content_type="text/html",
                              headers=dict(SECURITY_HEADERS))

    class Asset(View):
        async def get(self, request: Any, name: str) -> Any:
            if name not in ASSETS:
                return answer(self, 404, {"error": "no such asset"})
            return self.bytes(asset(name), content_type=ASSETS[name],
                              headers=dict(SECURITY_HEADERS))

    class Entities(View):
        async def get(self, request: Any) -> Any:
            return answer(self, *await console.entities(request.query))

    class Entity(View):
        async def get(self, request: Any) -> Any:
            return answer(self, *await console.entity(request.query))

    class Quotas(View):
        async def get(self, request: Any) -> Any:
            return answer(self, *console.quotas())

        async def post(self, request: Any) -> Any:
            body = await request.content.read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                return answer(self, 413, {"error": "the request is larger than 64 kB"})
            return answer(self, *await console.change(
                body, request.headers.get("Authorization"), str(request.remote)))

    app.page("/console")(Page)
    app.page("/console/static/{name}")(Asset)
    app.page("/console/api/entities")(Entities)
    app.page("/console/api/entity")(Entity)
    app.page("/console/api/quotas")(Quotas)
