"""The console's answers, cluster-wide from whichever worker serves them.

A worker answers for the windows it holds (`local`); asked by a browser, it asks every other
worker the group's assignment names (Faust's table metadata: the hosts holding the windows
table's partitions) for the same, and merges. Quota changes go through the code of
`quota-streams quotas alter`, only when editing is on and the request carries the token.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from app.admin.config_topic import level_path, write_records
from app.admin.entities import (
    build_records,
    describe_entity,
    parse_add_config,
    parse_delete_config,
    parse_entity as parse_entity_options,
)
from app.admin.views import describe_all
from app.console.detail import entity_windows
from app.console.index import ENTITY_ID, ConsoleIndex
from app.console.query import QueryError, StateOf, merge, parse_query, select
from app.engine.configs import ConfigUpdate, QuotaConfigs
from app.engine.engine import EngineSettings
from app.errors import UserError
from app.kafka.security import KafkaSecurity
from app.signing import Signing

log = logging.getLogger("quota_streams.console")

#: how long a worker waits for another's answer before the page says it is partial
PEER_TIMEOUT_S = 3.0
#: how long a change's answer waits for this worker to read the change back from the config
#: topic, so the page lists what it just wrote; then it answers `in_force: false`
SETTLE_S = 10.0
SETTLE_POLL_S = 0.05

Answer = tuple[int, Any]
#: (worker URL, path, params) -> the JSON it answered
Fetch = Callable[[str, str, Mapping[str, str]], Awaitable[Any]]
#: the validated records of one change -> written to the config topic
Write = Callable[[list[tuple[dict[str, Any], ConfigUpdate]]], Awaitable[None]]


@dataclass(frozen=True)
class ConsoleAccess:
    """Who may change quotas: nobody unless `edit`, and then only with `token`."""

    edit: bool = False
    token: str = ""

    def refusal(self, authorization: str | None) -> Answer | None:
        """Why a change is refused (status, message), or None if it is allowed."""
        if not self.edit or not self.token:
            return 403, "quota editing is off on this worker (QS_CONSOLE_EDIT)"
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(),
                                                                 self.token.encode()):
            return 401, "a valid console token is required to change quotas"
        return None


def config_writer(bootstrap: str, topic: str, signing: Signing, security: KafkaSecurity
                  ) -> Write:
    """Writes a change's records to the config topic as `quotas alter` does (sealed, keyed
    for compaction, `ts` stamped at the send)."""
    async def write(records: list[tuple[dict[str, Any], ConfigUpdate]]) -> None:
        await write_records(bootstrap, topic, records, None, stamp_now=True, signing=signing,
                            security=security)
    return write


class Console:
    """Everything the console's pages ask a worker, as plain (status, JSON) answers."""

    def __init__(self, index: ConsoleIndex, state_of: StateOf,
                 configs: Callable[[], QuotaConfigs], engine_settings: EngineSettings,
                 access: ConsoleAccess, url: str, peers: Callable[[], list[str]], fetch: Fetch,
                 write: Write, clock: Callable[[], float] = time.time,
                 settle_s: float = SETTLE_S) -> None:
        self.index = index
        self.state_of = state_of
        self.configs = configs
        self.engine_settings = engine_settings
        self.access = access
        self.url = url
        self.peers = peers
        self.fetch = fetch
        self.write = write
        self.clock = clock
        self.settle_s = settle_s

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def _ask_peers(self, path: str, params: Mapping[str, str]
                         ) -> tuple[list[Any], list[str]]:
        """Every other worker's local answer, and the workers that gave none."""
        peers = [p for p in self.peers() if p != self.url]
        asked = {**params, "local": "1"}
        answers = await asyncio.gather(
            *(asyncio.wait_for(self.fetch(p, path, asked), PEER_TIMEOUT_S) for p in peers),
            return_exceptions=True)
        got, missing = [], []
        for peer, answer in zip(peers, answers):
            if isinstance(answer, BaseException):
                log.warning("console: worker %s did not answer %s: %r", peer, path, answer)
                missing.append(peer)
            else:
                got.append(answer)
        return got, missing

    async def entities(self, params: Mapping[str, str]) -> Answer:
        """The overview's page of windows (`app.console.query`)."""
        try:
            query = parse_query(params)
        except QueryError as exc:
            return 400, {"error": str(exc)}
        now = self.now_ms()
        total, rows = select(self.index, query, self.state_of, now, self.url)
        if params.get("local") == "1":
            return 200, {"total": total, "rows": rows}
        answers, missing = await self._ask_peers("/console/api/entities", query.params())
        pages = [(total, rows)] + [(int(a["total"]), a["rows"]) for a in answers]
        total, rows = merge(pages, query)
        return 200, {"total": total, "rows": rows, "offset": query.offset, "now_ms": now,
                     "workers": 1 + len(answers), "missing": missing}

    async def entity(self, params: Mapping[str, str]) -> Answer:
        """An entity's windows on every worker, with explanations, configs and charts; the
        entity is named by the key its overview rows carry (`id`)."""
        ident = params.get("id", "")
        if not ENTITY_ID.fullmatch(ident):
            return 400, {"error": "id: an entity's key as the overview's rows give it"}
        now = self.now_ms()
        windows = entity_windows(self.index, ident, self.state_of, self.configs(),
                                 self.engine_settings, now, self.url)
        if params.get("local") == "1":
            return 200, {"windows": windows}
        answers, missing = await self._ask_peers("/console/api/entity", {"id": ident})
        for answer in answers:
            windows.extend(answer["windows"])
        if not windows:
            return 404, {"error": "no worker holds a window of this entity now (an idle "
                                  "entity's windows expire)", "missing": missing}
        windows.sort(key=lambda w: (w["quota"], -1 if w["broker"] is None else w["broker"]))
        entity = windows[0]["entity"]
        named = {k: v for k, v in entity.items() if v != ""}  # a user quota's window: no client
        return 200, {"entity": entity, "level": level_path(named), "windows": windows,
                     "now_ms": now, "missing": missing,
                     "window": {"num": self.engine_settings.window_num,
                                "ms": self.engine_settings.window_ms}}

    def quotas(self) -> Answer:
        """Every configured quota with its level, as `quotas describe` lists them."""
        return 200, {"quotas": describe_all(self.configs()), "editable": self.access.edit}

    async def change(self, body: bytes, authorization: str | None, remote: str) -> Answer:
        """Alter or delete quotas of one entity, as `quotas alter` does:
        {"entity": [{"type": "users", "name": "alice"} | {"type": ..., "default": true}],
         "add": "k=v,...", "delete": "k,..."}."""
        refused = self.access.refusal(authorization)
        if refused is not None:
            log.warning("console: quota change from %s refused: %s", remote, refused[1])
            return refused[0], {"error": refused[1]}
        try:
            request = orjson.loads(body)
            if not isinstance(request, dict):
                raise UserError("the request must be a JSON object")
            records = build_records(entity_options(request.get("entity")),
                                    parse_add_config(text_field(request, "add")),
                                    parse_delete_config(text_field(request, "delete")))
        except orjson.JSONDecodeError:
            return 400, {"error": "the request is not JSON"}
        except UserError as exc:
            return 400, {"error": str(exc)}
        await self.write(records)
        for record, _ in records:
            log.info("console: %s changed quotas of %s (%s): %s", remote,
                     describe_entity(record["entity"]), level_path(record["entity"]),
                     orjson.dumps(record["quotas"]).decode())
        in_force = await self._settled([update for _, update in records])
        return 200, {"written": [record for record, _ in records], "in_force": in_force}

    async def _settled(self, updates: list[ConfigUpdate]) -> bool:
        """Whether this worker reads the change back from the config topic within `settle_s`
        (its quota list then shows it; a worker busy catching up answers later than a quiet
        one, and the page says so rather than listing what it no longer holds)."""
        for _ in range(max(1, round(self.settle_s / SETTLE_POLL_S))):
            if all(in_force(self.configs(), update) for update in updates):
                return True
            await asyncio.sleep(SETTLE_POLL_S)
        return all(in_force(self.configs(), update) for update in updates)


def in_force(configs: QuotaConfigs, update: ConfigUpdate) -> bool:
    """Whether applying `update` would change nothing: it is what `configs` hold now."""
    after = configs.copy()
    after.apply(update)
    return describe_all(after) == describe_all(configs)


def text_field(request: Mapping[str, Any], name: str) -> str | None:
    value = request.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise UserError(f"{name} must be text such as k=v,k2=v2")
    return value


def entity_options(parts: Any) -> Any:
    """The page's entity parts as `quotas alter`'s --entity-type/--entity-name options."""
    if not isinstance(parts, list) or not parts or len(parts) > 2:
        raise UserError("entity: one or two parts, e.g. [{\"type\": \"users\", \"name\": \"alice\"}]")
    options: list[tuple[str, Any]] = []
    for part in parts:
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise UserError("entity: each part needs a type (users, clients, ips, brokers)")
        options.append(("type", part["type"]))
        if part.get("default") is True:
            options.append(("default", None))
        elif isinstance(part.get("name"), str) and part["name"]:
            options.append(("name", part["name"]))
    return parse_entity_options(options, require_names=True)
