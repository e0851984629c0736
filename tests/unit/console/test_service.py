"""The console's answers: cluster-wide from whichever worker serves them (a worker that does
not answer is named, not hidden), an entity's windows with their explanation, and quota changes
through `quotas alter`'s validation, only with editing on and the token."""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

import orjson
import pytest

from app.console.index import ConsoleIndex, entity_id
from app.console.query import Query, select
from app.console.service import Console, ConsoleAccess
from tests.unit.console.engine_windows import T0, state_of, windows

TOKEN = "t" * 32


def console(index: ConsoleIndex, engine: Any, *, peers: dict[str, Any] | None = None,
            access: ConsoleAccess = ConsoleAccess(True, TOKEN), read_back_after: int | None = 0,
            settle_s: float = 10.0) -> tuple[Console, list[Any]]:
    """A console over `engine`; what it writes reaches the engine's configs after
    `read_back_after` of the console's polls (None: never), as a worker reads its topic."""
    written: list[Any] = []
    peers = peers or {}
    polls = 0

    def configs() -> Any:
        nonlocal polls
        polls += 1
        if read_back_after is not None and polls > read_back_after:
            while written:
                engine.configs.apply(written.pop(0)[1])
        return engine.configs

    async def fetch(url: str, path: str, params: Mapping[str, str]) -> Any:
        answer = peers[url]
        if isinstance(answer, Exception):
            raise answer
        assert params["local"] == "1"
        return answer(path, params)

    async def write(records: list[Any]) -> None:
        written.extend(records)
        sent.extend(records)

    sent: list[Any] = []
    return Console(index, state_of(engine), configs, engine.settings, access,
                   "http://w0", lambda: ["http://w0", *peers], fetch, write,
                   clock=lambda: (T0 + 5_000) / 1000, settle_s=settle_s), sent


def test_the_overview_merges_every_workers_windows_and_names_the_silent() -> None:
    engine, index, _ = windows()
    mine = ConsoleIndex(0)
    mine.partitions = {p: c for p, c in index.partitions.items() if p < 2}
    theirs = ConsoleIndex(0)
    theirs.partitions = {p: c for p, c in index.partitions.items() if p >= 2}

    def peer(path: str, params: Mapping[str, str]) -> Any:
        total, rows = select(theirs, Query(limit=int(params["limit"])), state_of(engine),
                             T0 + 5_000, "http://w1")
        return orjson.loads(orjson.dumps({"total": total, "rows": rows}))

    served, _ = console(mine, engine, peers={"http://w1": peer,
                                             "http://w2": TimeoutError("no answer")})
    status, page = asyncio.run(served.entities({"limit": "200"}))
    assert status == 200 and page["total"] == len(index)
    assert {r["worker"] for r in page["rows"]} == {"http://w0", "http://w1"}
    assert page["missing"] == ["http://w2"] and page["workers"] == 2
    assert asyncio.run(served.entities({"sort": "nope"}))[0] == 400


def test_an_entity_page_explains_each_window_with_kafkas_formula() -> None:
    engine, index, _ = windows()
    served, _ = console(index, engine)
    ident = entity_id({"user": "erin", "client_id": ""})
    status, page = asyncio.run(served.entity({"id": ident}))
    assert status == 200 and page["level"] == "/config/users/erin"
    assert page["entity"] == {"user": "erin", "client_id": ""}
    quotas = {w["quota"]: w for w in page["windows"]}
    assert set(quotas) == {"producer_byte_rate", "request_percentage"}
    produce = quotas["producer_byte_rate"]
    assert "observed   O = sum / window" in produce["explanation"]
    assert "limit      T = 20,000 B/s from /config/users/<default>" in produce["explanation"]
    assert produce["precedence"][-1] == {"level": "/config/users/<default>", "value": 20000.0}
    assert produce["history"] is not None  # opened: charted from now on
    for bad in ("", "erin", ident.upper(), ident + "0", '{"user": "erin"}'):
        assert asyncio.run(served.entity({"id": bad}))[0] == 400
    gone = entity_id({"user": "nobody", "client_id": ""})
    assert asyncio.run(served.entity({"id": gone}))[0] == 404


def test_an_entity_with_the_longest_names_has_a_short_key_of_its_own() -> None:
    """A 1,024-character CJK client id: its key fits any URL, and differs from the key of the
    same names as a user-quota window (no client id) or another client."""
    wide = "名" * 1024
    keys = {entity_id({"user": "", "client_id": wide}), entity_id({"client_id": wide}),
            entity_id({"user": "", "client_id": wide[:-1]}), entity_id({"user": wide})}
    assert len(keys) == 4 and all(len(k) == 24 for k in keys)
    assert entity_id({"client_id": wide, "user": ""}) == entity_id({"user": "", "client_id": wide})


ALTER = {"entity": [{"type": "users", "name": "carol"}, {"type": "clients", "default": True}],
         "add": "producer_byte_rate=2048", "delete": "request_percentage"}


@pytest.mark.parametrize("access,authorization,status", [
    (ConsoleAccess(False, TOKEN), f"Bearer {TOKEN}", 403),
    (ConsoleAccess(True, TOKEN), None, 401),
    (ConsoleAccess(True, TOKEN), f"Basic {TOKEN}", 401),
    (ConsoleAccess(True, TOKEN), f"Bearer {TOKEN}x", 401),
])
def test_changes_need_editing_on_and_the_token(access: ConsoleAccess, authorization: str | None,
                                               status: int) -> None:
    engine, index, _ = windows(seconds=1)
    served, written = console(index, engine, access=access)
    assert asyncio.run(served.change(orjson.dumps(ALTER), authorization, "10.0.0.9"))[0] == status
    assert not written


def test_a_change_is_validated_and_written_as_quotas_alter_writes_it() -> None:
    engine, index, _ = windows(seconds=1)
    served, written = console(index, engine)
    status, body = asyncio.run(served.change(orjson.dumps(ALTER), f"Bearer {TOKEN}", "h"))
    assert status == 200
    ((record, update),) = written
    assert record["entity"] == {"user": "carol", "client_id": "<default>"}
    assert record["quotas"] == {"producer_byte_rate": 2048, "request_percentage": None}
    assert body["written"] == [record] and update.quotas == record["quotas"]
    assert body["in_force"] is True
    listed = {(q["level"], q["quota"]): q["value"] for q in served.quotas()[1]["quotas"]}
    assert listed[("/config/users/carol/clients/<default>", "producer_byte_rate")] == 2048
    for bad, reason in ((b"{", "not JSON"), (b"[]", "JSON object"),
                        (orjson.dumps({**ALTER, "add": "producer_byte_rate=1.5"}), "integer"),
                        (orjson.dumps({**ALTER, "entity": []}), "one or two parts"),
                        (orjson.dumps({**ALTER, "add": 5}), "must be text")):
        status, body = asyncio.run(served.change(bad, f"Bearer {TOKEN}", "h"))
        assert status == 400 and reason in body["error"], body
    assert len(written) == 1


def test_the_quota_list_is_what_describe_lists() -> None:
    engine, index, _ = windows(seconds=1)
    served, _ = console(index, engine, access=ConsoleAccess())
    status, body = served.quotas()
    assert status == 200 and body["editable"] is False
    assert {(q["level"], q["quota"]) for q in body["quotas"]} == {
        ("/config/users/<default>", "producer_byte_rate"),
        ("/config/users/<default>", "request_percentage"),
        ("/config/users/bob", "producer_byte_rate")}


@pytest.mark.parametrize("read_back_after,in_force", [(5, True), (None, False)])
def test_a_change_is_answered_once_this_worker_reads_it_back(read_back_after: int | None,
                                                             in_force: bool) -> None:
    """The page lists the quotas right after the answer: a worker still catching up on the
    config topic answers when it has read the change, or says it has not within the wait."""
    engine, index, _ = windows(seconds=1)
    served, _ = console(index, engine, read_back_after=read_back_after, settle_s=0.5)
    change = {"entity": [{"type": "users", "name": "carol"}], "add": "producer_byte_rate=1000"}
    status, body = asyncio.run(served.change(orjson.dumps(change), f"Bearer {TOKEN}", "h"))
    assert status == 200 and body["in_force"] is in_force
    listed = {(q["level"], q["quota"]) for q in served.quotas()[1]["quotas"]}
    assert (("/config/users/carol", "producer_byte_rate") in listed) is in_force
