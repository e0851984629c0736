"""The console in a real browser (Playwright driving Debian's Chromium) against two live workers
on a local Apache Kafka: the overview is cluster-wide from either worker and its numbers are the
windows' own (as `replay` computes them), an entity's page has its chart and explanation, a
client id made of markup renders as text, editing without the token is refused, and a quota
altered in the page is in force in the next directive."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import orjson
import pytest

from app.audit.synth import CONFIGS, USERS, scenario
from app.devstack.launcher import LocalCluster, isolated_env
from app.engine.engine import SEP
from app.intake.records import file_configs
from app.intake.replay import Replayer
from app.settings import load

try:  # imported as a module of tests.integration or from its own directory (rootdir-less)
    from tests.integration.browser import chromium
    from tests.integration.pipeline_io import read_directives, wait_committed
    from tests.integration.test_pipeline import produce
except ImportError:  # pragma: no cover
    from browser import chromium  # type: ignore[no-redef]  # noqa: F401
    from pipeline_io import read_directives, wait_committed  # type: ignore[no-redef]
    from test_pipeline import produce  # type: ignore[no-redef]

pytestmark = pytest.mark.integration

HOSTILE = "<img src=x onerror=window.__pwned=1>"
WIDE = ("Ünïcødé-名前-" * 100)[:1024]  # the longest name an event may carry, 2.3 kB of UTF-8
CJK = "長" * 1024  # as long, 3 kB of UTF-8: its JSON URL-encoded is 9 kB, past aiohttp's 8,190
OVERRIDE = "mallory\u202e-rtl"  # RIGHT-TO-LEFT OVERRIDE: reverses what follows it, unisolated
NEWLINE = "two\nlines"  # without an escape, reads as "two lines"
TOKEN = secrets.token_hex(16)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture
def console_env(tmp_path: Path) -> dict[str, str]:
    return {**isolated_env(f"c{uuid.uuid4().hex[:8]}"), "QS_PARTITIONS": "4",
            "QS_SCOPE": "broker", "QS_STATE_DIR": str(tmp_path / "state"),
            "QS_FLUSH_INTERVAL_MS": "500", "QS_CONSOLE_EDIT": "true", "QS_CONSOLE_TOKEN": TOKEN}


@pytest.fixture
def workers(kafka_bootstrap: str, console_env: dict[str, str], tmp_path: Path
            ) -> Iterator[LocalCluster]:
    local = LocalCluster(2, bootstrap=kafka_bootstrap, work_dir=tmp_path, env=console_env)
    try:
        yield local
    finally:
        local.stop()


def api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as page:
        return json.loads(page.read())


def post(port: int, body: dict[str, Any], token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}/console/api/quotas",
                                     data=orjson.dumps(body), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=20) as page:
            return page.status, json.loads(page.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def replayed_windows(lines: list[dict[str, Any]], env: dict[str, str]) -> dict[str, Any]:
    """Every client-quota window's latest check, as `replay` leaves it."""
    raw = [orjson.dumps(line) for line in lines]
    configs = file_configs(raw)
    replayer = Replayer(load(env).engine(), configs.updates, refused=configs.refused)
    for i, line in enumerate(raw):
        replayer.feed_line(i, line)
    replayer.finish()
    return dict(replayer.engine.windows_used)


def all_rows(port: int) -> dict[str, dict[str, Any]]:
    page = api(port, "/console/api/entities", limit="200")
    assert page["total"] <= 200
    return {row["key"]: row for row in page["rows"]}


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_the_console_shows_the_workers_windows_in_a_browser(
        chromium: str, workers: LocalCluster, console_env: dict[str, str]) -> None:
    from playwright.sync_api import expect, sync_playwright

    users = [*USERS, (HOSTILE, "app"), (WIDE, "wide"), (CJK, "cjk"), (OVERRIDE, "app"),
             (NEWLINE, "app")]
    now = int(time.time() * 1000)
    events = scenario(seed=11, start_ms=now - 30_000, seconds=15, users=users)
    bootstrap = workers.start_broker()
    asyncio.run(produce(bootstrap, console_env, CONFIGS))
    workers.start()
    workers.wait_ready()
    asyncio.run(produce(bootstrap, console_env, events))
    asyncio.run(wait_committed(bootstrap, console_env, timeout=120))
    expected = replayed_windows(CONFIGS + events, console_env)
    client_windows = {k: w for k, w in expected.items() if k[0] in "PFR"}
    assert len(client_windows) > 20

    # Cluster-wide from either worker: both answer, and together they hold every window.
    rows = wait_for(lambda: (r := all_rows(workers.ports[0])).keys() >= client_windows.keys()
                    and r, 60, "every window in the overview")
    assert all_rows(workers.ports[1]).keys() == rows.keys()
    assert len({row["worker"] for row in rows.values()}) == 2
    for key, window in client_windows.items():
        row = rows[key]
        assert row["observed"] == window.observed, key
        assert row["limit"] == window.limit and row["level"] == window.level, key
    page = api(workers.ports[0], "/console/api/entities", sort="utilization", limit="5")
    ratios = [r["utilization"] for r in page["rows"]]
    assert ratios == sorted(ratios, reverse=True) and page["workers"] == 2
    top = max((w for w in client_windows.values() if w.limit), key=lambda w: w.observed / w.limit)
    assert page["rows"][0]["key"] == top.key
    filtered = api(workers.ports[1], "/console/api/entities", q="ONERROR", limit="50")
    assert filtered["total"] == sum(1 for k in rows if f"{SEP}{HOSTILE}{SEP}" in k) > 0

    # Editing needs the token, whatever the page does.
    change = {"entity": [{"type": "users", "name": "carol"}], "add": "producer_byte_rate=1000"}
    assert post(workers.ports[0], change, None)[0] == 401
    assert post(workers.ports[0], change, "wrong-" + TOKEN)[0] == 401
    status, body = post(workers.ports[0], {**change, "add": "producer_byte_rate=-1"}, TOKEN)
    assert status == 400 and "producer_byte_rate" in body["error"]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.goto(f"http://127.0.0.1:{workers.ports[0]}/console")
            try:
                page.wait_for_selector("[data-testid=entity-link]", timeout=15_000)
            finally:
                assert not errors, errors
            shown = page.locator("#entities tbody tr").count()
            assert shown == min(50, len(rows))
            # the page shows the windows' numbers: each row's utilization is its window's
            for i in range(5):
                line = page.locator("#entities tbody tr").nth(i)
                row = rows[str(line.get_attribute("data-key"))]
                shown_pct = line.get_by_test_id("utilization").inner_text().strip()
                assert shown_pct == f"{row['utilization'] * 100:.1f}%", (row, shown_pct)
            assert "2 worker(s)" in page.get_by_test_id("status").inner_text()

            # the hostile client id is text: no image element, no script ran
            page.get_by_test_id("filter").fill("onerror")
            expect(page.locator("#entities tbody tr")).to_have_count(filtered["total"])
            expect(page.locator("#entities tbody tr").first).to_contain_text(HOSTILE)
            assert page.locator("#entities img").count() == 0
            assert page.evaluate("window.__pwned") is None
            page.get_by_test_id("filter").fill("名前")
            expect(page.locator("#entities tbody tr").first).to_contain_text(WIDE)

            # names are isolated, their invisible characters shown: the override reverses
            # nothing after it, the newline is an escape, not a space
            page.get_by_test_id("filter").fill("mallory")
            link = page.get_by_test_id("entity-link").first
            expect(link).to_contain_text("mallory\\u202E-rtl")
            assert "\u202e" not in link.inner_text()
            assert link.locator("bdi").count() == 1
            page.get_by_test_id("filter").fill("lines")
            expect(page.get_by_test_id("entity-link").first).to_contain_text("two\\nlines")

            # the longest name opens by its short key, and its page shows its windows
            page.get_by_test_id("filter").fill("長長長")
            expect(page.get_by_test_id("entity-link").first).to_contain_text(CJK)
            href = str(page.get_by_test_id("entity-link").first.get_attribute("href"))
            assert len(href) < 64, href
            page.get_by_test_id("entity-link").first.click()
            page.wait_for_selector("[data-testid=window] [data-testid=explanation]")
            assert CJK in page.get_by_test_id("entity-title").inner_text()
            assert "error" not in page.get_by_test_id("status").inner_text()
            assert not errors, errors

            # an answer that is not JSON (a proxy's page, aiohttp's own 400) is shown as an error
            page.goto(f"http://127.0.0.1:{workers.ports[0]}/console#entity=nope")
            expect(page.get_by_test_id("status")).to_contain_text("error: 400")
            page.route("**/console/api/entity?*", lambda route: route.fulfill(
                status=400, body="Bad Request: Got more than 8190 bytes", content_type="text/plain"))
            page.goto(f"http://127.0.0.1:{workers.ports[0]}/console#entity={'0' * 24}")
            expect(page.get_by_test_id("status")).to_contain_text(
                "error: 400 Bad Request: Got more than 8190 bytes")
            page.unroute("**/console/api/entity?*")
            errors.clear()

            # the override's entity page: its name isolated in the explanation too
            page.goto(f"http://127.0.0.1:{workers.ports[0]}/console")
            page.get_by_test_id("filter").fill("mallory")
            page.get_by_test_id("entity-link").first.click()
            page.wait_for_selector("[data-testid=window] [data-testid=explanation]")
            explanation = page.get_by_test_id("explanation").first
            assert explanation.locator("bdi").count() >= 1
            assert "\u202e" not in explanation.inner_text()
            assert "\u202e" not in page.get_by_test_id("entity-title").inner_text()
            page.goto(f"http://127.0.0.1:{workers.ports[0]}/console")
            page.wait_for_selector("[data-testid=entity-link]")

            # a click reaches the entity's windows, chart and explanation
            page.get_by_test_id("filter").fill("user=alice")
            expect(page.get_by_test_id("entity-link").first).to_contain_text("user=alice")
            page.get_by_test_id("entity-link").first.click()
            page.wait_for_selector("[data-testid=window] [data-testid=explanation]")
            assert "alice" in page.get_by_test_id("entity-title").inner_text()
            explanation = page.get_by_test_id("explanation").first.inner_text()
            assert "observed   O = sum / window" in explanation and "limit      T =" in explanation
            chart = page.get_by_test_id("chart").first
            expect(chart.locator("path[data-series]")).to_have_count(1, timeout=20_000)
            expect(chart.locator("path.limit")).to_have_count(1)

            # editing in the page: refused without the token, in force with it
            page.goto(f"http://127.0.0.1:{workers.ports[1]}/console#quotas")
            page.wait_for_selector("[data-testid=alter-form]")
            page.get_by_test_id("alter-name-1").fill("carol")
            page.get_by_test_id("alter-add").fill("producer_byte_rate=1000")
            page.get_by_test_id("alter-submit").click()
            expect(page.get_by_test_id("alter-result")).to_contain_text("token is required")
            page.get_by_test_id("alter-token").fill(TOKEN)
            page.get_by_test_id("alter-submit").click()
            expect(page.get_by_test_id("alter-result")).to_contain_text("written")
            expect(page.get_by_test_id("quota-table")).to_contain_text("/config/users/carol")
        finally:
            browser.close()

    # carol's next produces are judged by the quota set in the page
    later = int(time.time() * 1000)
    burst = [{"type": "batch", "v": 1, "broker": 1, "events": [
        {"type": "request", "v": 1, "ts": later + i, "user": "carol", "client_id": "ui",
         "api": "Produce", "bytes": 5000, "thread_time_ms": 0.1, "network_time_ms": 0.0,
         "listener": "PLAINTEXT"} for i in range(3)]}]
    asyncio.run(produce(bootstrap, console_env, burst))

    def carol_throttled() -> bool:
        found = asyncio.run(read_directives(bootstrap, console_env["QS_TOPIC_DIRECTIVES"],
                                            10_000, timeout=5))
        return any(d["entity"].get("user") == "carol" and d["quota"] == "producer_byte_rate"
                   and d["limit"] == 1000 and d["ts"] >= later
                   for d in map(orjson.loads, found))

    wait_for(carol_throttled, 60, "a directive under the quota set in the page")
