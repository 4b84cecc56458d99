"""The dashboard at `/` in a real headless Chromium, against mariadbd -> Replicator -> Redis -> API.

Chromium is Debian's (`apt-get install chromium`), driven by Playwright for Python through
`executable_path`; Playwright's own browser download is never used. Set
BINLOG_MIRROR_DASHBOARD_SCREENSHOT=docs/dashboard.png to save the screenshot the README shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from api.main import create_app
from api.server import ApiServer
from service.devtools.stack import LocalStack
from service.pipeline.status import ErrorStatus, ResyncStatus, ShapeStatus, State, TableStatus
from service.settings import Settings
from tests.api.apihelpers import StatusDouble, streaming_status
from tests.integration.test_api import TOKEN, Running, running

pytestmark = [pytest.mark.integration, pytest.mark.browser]

pw_api = pytest.importorskip("playwright.async_api")  # dev extra
Browser, Page, expect = pw_api.Browser, pw_api.Page, pw_api.expect

SCREENSHOT = os.environ.get("BINLOG_MIRROR_DASHBOARD_SCREENSHOT")
WAIT_MS = 30_000  # generous: the machine is shared; nothing here is timed


# Every visible text against its background (WCAG AA: 4.5:1), and a name on every input/chart.
A11Y_PROBLEMS = """() => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => ((c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const bg = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c;
    }
    return [255, 255, 255];
  };
  const bad = [];
  for (const el of document.querySelectorAll("body *")) {
    if (!el.getClientRects().length) continue;
    if (![...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    const [hi, lo] = [lum(rgb(getComputedStyle(el).color)), lum(bg(el))].sort((x, y) => y - x);
    const ratio = (hi + 0.05) / (lo + 0.05);
    if (ratio < 4.5) bad.push(el.tagName + "#" + el.id + "." + el.className + " " + ratio.toFixed(2));
  }
  for (const el of document.querySelectorAll("input, progress, button, canvas")) {
    const named = (el.labels && el.labels.length) || el.getAttribute("aria-label") || el.textContent.trim();
    if (!named) bad.push("no accessible name: " + el.tagName + "#" + el.id);
  }
  return bad;
}"""


def chromium() -> str:
    for candidate in (os.environ.get("BINLOG_MIRROR_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and (path := shutil.which(candidate)):
            return path
    pytest.skip("no system chromium: apt-get install chromium (make system-packages does)")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with pw_api.async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=chromium(), headless=True)
        try:
            yield b
        finally:
            await b.close()


class Watch:
    """Every URL the page asks for (HTTP and websocket), and every script error."""

    def __init__(self, page: Page) -> None:
        self.urls: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda r: self.urls.append(r.url))
        page.on("websocket", lambda ws: self.urls.append(ws.url))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)

    def foreign(self, netloc: str) -> list[str]:
        parts = [(u, urlsplit(u)) for u in self.urls]
        return [u for u, p in parts if p.netloc != netloc or p.scheme not in ("http", "ws")]


async def log_in(page: Page) -> None:
    await expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    await page.get_by_label("This service needs its API token").fill(TOKEN)
    await page.get_by_role("button", name="Connect").click()
    await expect(page.locator("#login")).to_be_hidden()


async def writes(run: Running, rounds: int) -> None:
    """A steady trickle of transactions over a few poll intervals, so a rate sample catches them."""
    for i in range(rounds):
        base = 1000 + i * 10
        values = ", ".join(f"({base + k}, 'r{i}k{k}')" for k in range(10))
        await run.asql(f"INSERT INTO a (id, v) VALUES {values}")
        await asyncio.sleep(0.4)


async def screenshots(page: Page, run: Running, path: str) -> None:
    """docs/dashboard.png (1366 wide, whole page) and its -phone twin, after a minute of writes."""
    for i in range(60):  # a varying rate, so the charts have a shape
        n = 5 + (i * 7) % 40
        values = ", ".join(f"({5000 + i * 100 + k}, 'shot{i}-{k}')" for k in range(n))
        await run.asql(f"INSERT INTO a (id, v) VALUES {values}", f"UPDATE b SET v = 'v{i}' WHERE id = 8")
        await asyncio.sleep(1)
    await page.get_by_role("button", name="Pause").click()  # a still tail for the picture
    await page.screenshot(path=path, full_page=True)
    await page.set_viewport_size({"width": 390, "height": 844})
    stem, dot, ext = path.rpartition(".")
    await page.screenshot(path=f"{stem}-phone{dot}{ext}")
    await page.set_viewport_size({"width": 1366, "height": 768})
    await page.get_by_role("button", name="Resume").click()


def tail_rows(page: Page, table: str) -> pw_api.Locator:
    return page.locator("#tail tbody tr[data-seq]", has=page.locator("td", has_text=table))


async def test_dashboard_shows_the_live_mirror(stack: LocalStack, browser: Browser) -> None:
    async with running(stack) as run:
        service = urlsplit(str(run.http.base_url)).netloc  # host:port of the API
        page = await browser.new_page(viewport={"width": 1366, "height": 768})
        watch = Watch(page)
        await page.goto(f"http://{service}/")
        await log_in(page)
        assert all("401" in e for e in watch.errors)  # the first reads, before the token
        watch.errors.clear()
        await expect(page.locator("#state")).to_have_text("streaming", timeout=WAIT_MS)
        await expect(page.locator("#role")).to_have_text("leader", timeout=WAIT_MS)
        await expect(page.locator("#tail-status")).to_have_text("live", timeout=WAIT_MS)

        await run.asql("INSERT INTO a (id, v) VALUES (1, 'one')", "INSERT INTO b (id, v) VALUES (7, 'seven')")
        await run.asql("UPDATE a SET v = 'uno' WHERE id = 1")
        await writes(run, 8)
        await run.asql("DELETE FROM b WHERE id = 7")

        # the tables, with rows applied by op
        db = run.db
        row_a = page.locator(f'#tables tbody tr[data-table="{db}.a"]')
        row_b = page.locator(f'#tables tbody tr[data-table="{db}.b"]')
        await expect(row_a.locator("td").nth(2)).to_have_text("81", timeout=WAIT_MS)  # inserts
        await expect(row_a.locator("td").nth(3)).to_have_text("1")  # updates
        await expect(row_b.locator("td").nth(4)).to_have_text("1", timeout=WAIT_MS)  # deletes
        await expect(row_a.locator("td").nth(0)).to_have_text("yes")
        await expect(row_a.locator("td").nth(1)).to_have_text("id")

        # the lag figure and its chart
        await expect(page.locator("#lag-seconds")).to_have_text(re.compile(r"^\d+(\.\d)? s$"))
        await page.wait_for_function("Number(document.getElementById('lag-chart').dataset.points) > 0")
        # the rows/s chart caught the trickle
        await page.wait_for_function(
            "Number(document.getElementById('rate-chart').dataset.max) > 0", timeout=WAIT_MS
        )

        # the live tail: op, table, key, changed columns
        update = page.locator("#tail tbody tr[data-seq]", has=page.locator("td.op", has_text="update"))
        await expect(update).to_have_count(1, timeout=WAIT_MS)
        await expect(update.locator("td").nth(3)).to_have_text(f"{db}.a")
        await expect(update.locator("td").nth(4)).to_have_text("1")
        await expect(update.locator("td").nth(5)).to_have_text('v="uno"')
        delete = page.locator("#tail tbody tr[data-seq]", has=page.locator("td.op", has_text="delete"))
        await expect(delete.locator("td").nth(4)).to_have_text("7", timeout=WAIT_MS)

        # the filter box keeps only matching tables
        await page.get_by_label("Filter by table").fill(f"{db}.b")
        await expect(tail_rows(page, f"{db}.a")).to_have_count(0)
        await expect(tail_rows(page, f"{db}.b")).to_have_count(2)
        await page.get_by_label("Filter by table").fill("")

        # pause holds the tail still and counts what arrives; resume shows it
        top_before = await page.locator("#tail tbody tr[data-seq]").first.get_attribute("data-seq")
        await page.get_by_role("button", name="Pause").click()
        await run.asql("INSERT INTO b (id, v) VALUES (8, 'eight')")
        await expect(page.locator("#tail-status")).to_have_text("paused, 1 new", timeout=WAIT_MS)
        assert await page.locator("#tail tbody tr[data-seq]").first.get_attribute("data-seq") == top_before
        await page.get_by_role("button", name="Resume").click()
        newest = page.locator("#tail tbody tr[data-seq]").first
        await expect(newest.locator("td").nth(5)).to_have_text('id=8, v="eight"')

        # errors and checkpoint panels are filled from /position
        await expect(page.locator("#err-count")).to_have_text("0")
        await expect(page.locator("#applied-pos")).to_have_text(re.compile(r"\.\d+:\d+$"))
        await expect(page.locator("#source")).to_contain_text("mariadb")
        await expect(page.locator("#redis-url")).to_have_text(re.compile(r"^redis://127\.0\.0\.1:\d+"))

        assert await page.evaluate(A11Y_PROBLEMS) == []

        if SCREENSHOT:
            await screenshots(page, run, SCREENSHOT)

        # no horizontal scrolling of the page at 1366x768 nor at a phone's width (tables scroll inside)
        for width, height in ((1366, 768), (390, 844)):
            await page.set_viewport_size({"width": width, "height": height})
            overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"page wider than a {width}px viewport by {overflow}px"

        # the token is asked once per browser tab: a reload goes straight to the data
        await page.reload()
        await expect(page.locator("#state")).to_have_text("streaming", timeout=WAIT_MS)
        await expect(page.locator("#login")).to_be_hidden()
        assert await page.evaluate("sessionStorage.getItem('binlog-mirror.token')") == TOKEN

        await page.close()
        assert watch.foreign(service) == [], "the page asked another host"
        assert any(urlsplit(u).scheme == "ws" for u in watch.urls)
        assert watch.errors == []


async def test_wrong_token_is_asked_again(stack: LocalStack, browser: Browser) -> None:
    async with running(stack) as run:
        service = urlsplit(str(run.http.base_url)).netloc  # host:port of the API
        page = await browser.new_page()
        await page.goto(f"http://{service}/")
        await expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
        await page.get_by_label("This service needs its API token").fill("not-the-token")
        await page.get_by_role("button", name="Connect").click()
        await expect(page.locator("#token-error")).to_have_text("That token was refused.", timeout=WAIT_MS)
        await expect(page.locator("#main")).to_be_hidden()
        await page.close()


async def test_standby_resync_and_error_panels(browser: Browser) -> None:
    """What the writes above cannot show on demand: a standby, a resync in flight, an error.

    A real uvicorn serves the app over a status double; no token is set, so none is asked.
    """
    resync = ResyncStatus(started_ts=time.time(), rows_done=40, rows_total=100, reason="ALTER TABLE orders")
    shape = ShapeStatus(
        "shop.orders", (("id", "id"), ("placed_at", "placed")), ("secret",), "1:00ff", "app:order:{id}",
        (("zset", "app:orders-by-placed", "placed_at"),), copies=1234, entries=(1200,),
    )  # fmt: skip
    orders = TableStatus(schema="shop", table="orders", primary_key=("id",), resync=resync, shape=shape)
    nokey = TableStatus(schema="shop", table="log", key_source="none", mirrored=False, skipped_rows=3)
    snapshot = streaming_status(
        state=State.RESYNCING,
        leader=False,
        standby=True,  # another instance holds the lease: a healthy standby is ready
        tables=(nokey, orders),
        errors=ErrorStatus(count=2, last="SinkError('redis down')", last_ts=time.time(), retriable=True),
    )
    settings = Settings(api_port=0, redis="redis://:pw-secret@cache:6380/2")
    server = ApiServer(create_app(settings, StatusDouble(snapshot)), settings)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            await server.started.wait()
        page = await browser.new_page(viewport={"width": 390, "height": 844})
        await page.goto(f"http://127.0.0.1:{server.port}/")
        await expect(page.locator("#state")).to_have_text("resyncing", timeout=WAIT_MS)
        await expect(page.locator("#role")).to_have_text("standby")
        await expect(page.locator("#login")).to_be_hidden()
        await expect(page.locator("#redis-url")).to_have_text("redis://***@cache:6380/2")
        row = page.locator('#tables tbody tr[data-table="shop.orders"]')
        bar = row.get_by_role("progressbar", name="resync of shop.orders")
        assert (await bar.get_attribute("max"), await bar.evaluate("b => b.value")) == ("100", 40)
        await expect(row.locator("td").nth(7)).to_have_text(" 40 / 100")
        await expect(row.locator("td").nth(8)).to_have_text(
            "app:order:{id} (1,234 rows): 2 fields; without secret; placed_at→placed; "
            "zset app:orders-by-placed (1,200 entries)"
        )
        skipped = page.locator('#tables tbody tr[data-table="shop.log"]')
        await expect(skipped.locator("td").nth(0)).to_have_text("skipped: no usable key")
        await expect(skipped.locator("td").nth(5)).to_have_text("3")
        await expect(skipped.locator("td").nth(8)).to_have_text("-")  # unshaped
        await expect(page.locator("#err-count")).to_have_text("2")
        await expect(page.locator("#err-last")).to_have_text("SinkError('redis down')")
        await expect(page.locator("#err-retriable")).to_have_text("yes (retried with backoff)")
        await expect(page.locator("#reasons")).to_have_text("nothing: ready")
        await expect(page.locator("#ready")).to_have_text("ready")
        assert await page.evaluate(A11Y_PROBLEMS) == []
        overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0
        await page.close()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_public_address_without_a_token_says_why_the_page_is_empty(browser: Browser) -> None:
    """On 0.0.0.0 with no token the page loads (it holds no data) but its reads are refused: it
    shows the server's reason instead of a bare error."""
    settings = Settings(api_port=0, api_host="0.0.0.0")
    server = ApiServer(create_app(settings, StatusDouble(streaming_status())), settings)
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(15):
            await server.started.wait()
        page = await browser.new_page()
        await page.goto(f"http://127.0.0.1:{server.port}/")
        await expect(page.locator("#state")).to_have_text("refused", timeout=WAIT_MS)
        await expect(page.locator("#updated")).to_contain_text(
            "HTTP 403 (refused: the API listens on 0.0.0.0"
        )
        await expect(page.locator("#updated")).to_contain_text("api_allow_unauthenticated")
        await page.close()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
