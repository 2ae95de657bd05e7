"""The web viewer, against a real daemon: its guard over HTTP, and its pages in Chromium.

The daemon runs as a subprocess; `memoryd ui --no-browser` asks it for the viewer
and prints the address. The browser tests drive Debian's Chromium (/usr/bin/chromium)
with Playwright; without that browser they are skipped. `.ci/run` installs it and
then sets VIEWER_TESTS_REQUIRE_BROWSER, so that a browser gone missing fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import daemon_env, memoryd_command, wait_for, write_config
from test_agents import Daemon, claude_line, quick_daemon

CHROMIUM = "/usr/bin/chromium"
PROJECT = "/home/user/payments-api"
FACT = "the staging database listens on port 5433"
LONG_SESSION = 10_000


def _viewer_url(daemon: Daemon) -> str:
    done = daemon.cli("ui", "--no-browser")
    assert done.returncode == 0, done.stderr
    assert "served by the daemon" in done.stderr
    url = done.stdout.strip()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/login\?token=[\w-]{20,}", url), url
    return url


def _long_transcript(root: Path) -> None:
    """A Claude session of LONG_SESSION messages, with one long tool output."""
    directory = root / "-home-user-payments-api"
    directory.mkdir(parents=True)
    start = datetime.now(UTC) - timedelta(days=2)
    lines = []
    for i in range(LONG_SESSION):
        role = "user" if i % 2 == 0 else "assistant"
        text = (f"step {i}: " + ("the full build log follows " + "x" * 5000 if i == 41
                                 else f"message number {i} about the ledger"))
        lines.append(claude_line("long-session", f"u{i:05d}", role, text,
                                 start + timedelta(seconds=i)))
    (directory / "long-session.jsonl").write_text("".join(lines))


@pytest.fixture
def viewer(tmp_path: Path) -> Iterator[tuple[Daemon, str]]:
    _long_transcript(tmp_path / "claude")
    with quick_daemon(tmp_path) as daemon:
        assert daemon.cli("ingest", "--once").returncode == 0
        done = daemon.cli("remember", FACT, "--project", PROJECT)
        assert done.returncode == 0, done.stderr
        daemon.start()
        yield daemon, _viewer_url(daemon)


def _base(url: str) -> str:
    return url.split("/login")[0]


# -- the guard, over plain HTTP ---------------------------------------------------------

def test_the_viewer_refuses_whoever_lacks_the_token(viewer: tuple[Daemon, str]) -> None:
    """No token, a wrong token, another Host, a POST without the form token or from
    another origin: refused. With the token: pages with a strict CSP and nothing
    fetched from elsewhere."""
    daemon, url = viewer
    base = _base(url)
    with httpx.Client(base_url=base, timeout=30) as anonymous:
        for path in ("/", "/sessions", "/memories?q=staging", "/activity", "/chart.svg"):
            refused = anonymous.get(path)
            assert refused.status_code == 403 and "staging" not in refused.text, path
        assert anonymous.get("/login?token=wrong").status_code == 403
        assert "memoryd_ui" not in anonymous.cookies
    with httpx.Client(base_url=base, timeout=30) as browser:
        assert browser.get(url.replace(base, "")).status_code == 303
        assert browser.get("/", headers={"Host": "evil.example"}).status_code == 400
        page = browser.get("/")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        for path in ("/", "/sessions", "/memories?q=staging+database", "/activity"):
            html = browser.get(path).text
            outside = [u for u in re.findall(r"(?:src|href)=\"(https?://[^\"]+)", html)]
            assert outside == [], (path, outside)
        token = re.search(r'name="csrf" value="(\w+)"', browser.get("/memories").text)
        assert token is not None
        missing = browser.post("/memories", data={"content": "planted without a token"})
        assert missing.status_code == 403
        foreign = browser.post("/memories", data={"content": "planted cross-site",
                                                  "csrf": token.group(1)},
                               headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        made = browser.post("/memories", data={"content": "the deploy window is noon",
                                               "csrf": token.group(1)})
        assert made.status_code == 303
        new_id = made.headers["location"].split("/memories/")[1].split("?")[0]
        fixed = browser.post(f"/memories/{new_id}/correct",
                             data={"content": "the deploy window is one o'clock",
                                   "reason": "moved", "csrf": token.group(1)})
        assert fixed.status_code == 303
        shown = browser.get(fixed.headers["location"])
        assert "one o&#39;clock" in shown.text and "moved" in shown.text
    exported = daemon.cli("export").stdout
    assert "planted" not in exported and "the deploy window is one o'clock" in exported
    recalled = json.loads(daemon.cli("recall", "deploy window", "--json").stdout)
    assert [r["content"] for r in recalled] == ["the deploy window is one o'clock"]
    # What the viewer did is in the audit trail, as coming from it.
    trail = json.loads(daemon.cli("audit", "--json").stdout)
    assert any(e["interface"] == "ui" and e["action"] == "remember" for e in trail)
    # The token never reaches the daemon's log.
    secret = url.split("token=")[1]
    assert secret not in (daemon.tmp / "daemon.log").read_text()


def test_the_viewer_s_cookie_is_a_session_not_its_token(viewer: tuple[Daemon, str]) -> None:
    """A browser sends a 127.0.0.1 cookie to every local port: the cookie is a random
    session id named for the viewer's port, never the secret token, and each login gets
    its own; the CSRF token is not derived from the token and one session's does not
    serve another (issue 61.5)."""
    _daemon, url = viewer
    base = _base(url)
    secret = url.split("token=")[1]
    port = base.rsplit(":", 1)[1]
    tokens, sessions = [], []
    for _ in range(2):
        with httpx.Client(base_url=base, timeout=30) as browser:
            assert browser.get(url.replace(base, "")).status_code == 303
            cookies = dict(browser.cookies)
            assert list(cookies) == [f"memoryd_ui_{port}"], cookies
            session = cookies[f"memoryd_ui_{port}"]
            assert session != secret and secret not in session and len(session) >= 32
            found = re.search(r'name="csrf" value="(\w+)"', browser.get("/memories").text)
            assert found is not None
            assert found.group(1) != csrf_token(secret)
            tokens.append(found.group(1))
            sessions.append(session)
    assert sessions[0] != sessions[1] and tokens[0] != tokens[1]
    with httpx.Client(base_url=base, timeout=30,
                      cookies={f"memoryd_ui_{port}": sessions[1]}) as other:
        crossed = other.post("/memories", data={"content": "planted", "csrf": tokens[0]})
        assert crossed.status_code == 403
    with httpx.Client(base_url=base, timeout=30,
                      cookies={f"memoryd_ui_{port}": secret}) as token_as_cookie:
        assert token_as_cookie.get("/").status_code == 403


def csrf_token(secret: str) -> str:
    """How the CSRF token was made from the secret token before (a constant's HMAC)."""
    import hashlib
    import hmac

    return hmac.new(secret.encode(), b"memoryd-ui-csrf", hashlib.sha256).hexdigest()


# -- pages in a real browser ------------------------------------------------------------

def _chromium() -> str:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.environ.get("VIEWER_TESTS_REQUIRE_BROWSER"):
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    pytest.skip(f"no {CHROMIUM} (apt-get install chromium)")


@pytest.fixture
def browser() -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"])
        try:
            yield launched
        finally:
            launched.close()


def _shoot(page: Any, name: str) -> None:
    """Screenshots for the README, when VIEWER_SCREENSHOTS names a directory."""
    where = os.environ.get("VIEWER_SCREENSHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(where) / f"{name}.png"), full_page=False)


def test_search_finds_a_fact_and_forget_removes_it(viewer: tuple[Daemon, str],
                                                   browser: Any) -> None:
    daemon, url = viewer
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    assert page.locator("h1").inner_text() == "Overview"
    assert page.locator("img[alt^='messages per day']").evaluate("i => i.naturalWidth") > 0
    _shoot(page, "overview")
    page.click("text=Memories")
    page.fill("input[name=q]", "staging database port")
    page.click("button:has-text('Search')")
    result = page.locator(".result").first
    assert FACT in result.inner_text()
    _shoot(page, "memories")
    result.locator("a").first.click()
    assert page.locator("pre.content").inner_text() == FACT
    _shoot(page, "memory")
    page.click("text=Forget…")
    assert "never recalled" in page.locator("main").inner_text()
    page.click("button:has-text('Forget')")
    assert "forgot" in page.locator(".notice").inner_text()
    page.fill("input[name=q]", "staging database port")
    page.click("button:has-text('Search')")
    assert FACT not in page.locator("main").inner_text()
    assert errors == []
    # Another browser profile, without the token: refused, and shown nothing.
    stranger = browser.new_context().new_page()
    answer = stranger.goto(f"{_base(url)}/memories?q=staging")
    assert answer is not None and answer.status == 403
    assert "open it with `memoryd ui`" in stranger.content()
    # The CLI agrees: forgotten for everyone.
    assert json.loads(daemon.cli("recall", "staging database port", "--json").stdout) == []


def test_pages_stay_usable_with_a_ten_thousand_message_session(
        viewer: tuple[Daemon, str], browser: Any) -> None:
    daemon, url = viewer
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(url)
    page.click("text=Sessions")
    assert "10,000" in page.locator("main").inner_text()
    _shoot(page, "sessions")
    page.click("a:has-text('long-session')")
    assert page.locator("li.msg").count() == 200
    assert "Messages 1–200 of 10000" in page.locator("nav.pager").inner_text()
    folded = page.locator("#m41 details").first
    assert folded.count() == 1 and not folded.evaluate("d => d.open")
    _shoot(page, "session")
    page.click("nav.pager >> text=next")
    assert page.locator("li.msg").first.get_attribute("id") == "m200"
    # Synced, the session's messages link to the memories made from them.
    wait_for(lambda: daemon.cli("sessions", "--json").returncode == 0
             and json.loads(daemon.cli("sessions", "--json").stdout)[0]["unsynced_messages"]
             == 0, timeout=120, what="the long session saved to memory")
    page.reload()
    page.locator("li.msg a.tag").first.click()
    assert page.locator("h1").inner_text().startswith("Memory ")
    # What a hook gives an agent shows in Activity, linked to the memories given.
    given = daemon.hook("claude", "UserPromptSubmit", {
        "session_id": "long-session", "transcript_path": None, "cwd": PROJECT,
        "hook_event_name": "UserPromptSubmit",
        "prompt": "which port does the staging database listen on?"})
    assert "5433" in given.stdout
    page.click("text=Activity")
    assert page.locator("h1").inner_text() == "Activity"
    row = page.locator("table").first.locator("tbody tr").first
    assert "hook" in row.inner_text() and "prompt" in row.inner_text()
    _shoot(page, "activity")


def test_memoryd_ui_serves_the_viewer_itself_without_a_daemon(tmp_path: Path) -> None:
    """No daemon: `memoryd ui` serves it until SIGTERM, with the same guard."""
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", {})
    env = daemon_env(tmp_path)
    assert subprocess.run(memoryd_command("--config", str(config), "remember", FACT),
                          env=env, capture_output=True, timeout=60).returncode == 0
    with (tmp_path / "ui.log").open("wb") as log, subprocess.Popen(
            memoryd_command("--config", str(config), "ui", "--no-browser"), env=env,
            stdout=subprocess.PIPE, stderr=log, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            base = _base(url)
            with httpx.Client(base_url=base, timeout=30) as client:
                assert client.get("/memories?q=staging").status_code == 403
                client.get(url.replace(base, ""))
                page = client.get("/memories", params={"q": "staging database"})
                assert FACT in page.text
        finally:
            proc.terminate()
            assert proc.wait(20) == 0
    assert "served by this command" in (tmp_path / "ui.log").read_text()


def test_the_viewer_costs_nothing_until_opened_and_stops_when_idle(tmp_path: Path) -> None:
    """The daemon's modules load no web framework; a viewer nobody uses stops by itself."""
    probe = ("import sys, memoryd.service, memoryd.api.server, memoryd.cli;"
             " print([m for m in ('starlette', 'jinja2', 'uvicorn') if m in sys.modules])")
    done = subprocess.run([*memoryd_command()[:1], "-c", probe], capture_output=True,
                          text=True, timeout=60, env=daemon_env(tmp_path))
    assert done.stdout.strip() == "[]", done.stderr

    import asyncio

    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.ui.data import ViewerData
    from memoryd.ui.server import UiServer

    config = write_config(tmp_path / "config.yaml", tmp_path / "state", {})

    async def go() -> None:
        async def never() -> Any:
            raise AssertionError("nothing asked")

        server = UiServer(ViewerData(load_settings(config), SystemClock(), never, never),
                          idle_timeout=0.4)
        await server.start()
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{server.port}/")).status_code == 403
        await asyncio.wait_for(server.wait(), timeout=10)
        assert not server.running
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient() as client:
                await client.get(f"http://127.0.0.1:{server.port}/")

    asyncio.run(go())


async def test_the_overview_shows_a_chain_of_layers_and_its_outbox(tmp_path: Path,
                                                                  clean_environment: Path
                                                                  ) -> None:
    """With `backends: [sqlite, jsonl]` the overview lists both layers and the outbox."""
    from memoryd.client import direct_ops
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.status import collect_status
    from memoryd.ui.data import ViewerData
    from memoryd.ui.server import UiServer

    config = write_config(tmp_path / "config.yaml", tmp_path / "state", {},
                          memory={"backends": ["sqlite", "jsonl"]})
    settings = load_settings(config)
    clock = SystemClock()
    async with direct_ops(settings, clock) as ops:
        await ops.run("remember", {"content": FACT})

        async def provide() -> Any:
            return ops

        async def status() -> dict[str, Any]:
            return await collect_status(settings, clock)

        server = UiServer(ViewerData(settings, clock, provide, status), idle_timeout=None)
        await server.start()
        try:
            base = f"http://127.0.0.1:{server.port}"
            async with httpx.AsyncClient(base_url=base) as client:
                await client.get(server.url[len(base):])
                page = (await client.get("/")).text
                layers = re.search(r"<h2>Memory layers</h2>(.*?)</table>", page, re.S)
                assert layers is not None, page
                assert "<td>sqlite</td>" in layers.group(1)
                assert "<td>jsonl</td>" in layers.group(1)
                assert "outbox: empty" in page
                found = (await client.get("/memories", params={"q": "staging"})).text
                assert FACT in found
        finally:
            await server.stop()


async def test_the_overview_counts_lag_per_agent_and_names_a_held_back_file(
        tmp_path: Path, clean_environment: Path) -> None:
    """Issue 36.10: the viewer said 0 B of lag for every source; it now agrees with status,
    held-back file included."""
    from memoryd.clock import SystemClock
    from memoryd.config import load_settings
    from memoryd.status import collect_status
    from memoryd.ui.data import ViewerData
    from memoryd.ui.server import UiServer

    root = tmp_path / "agents" / "claude"
    transcript = root / "-home-user-project" / "held.jsonl"
    transcript.parent.mkdir(parents=True)
    line = {"type": "user", "uuid": "u-1", "timestamp": "2026-01-02T03:04:05Z",
            "sessionId": "held", "cwd": "/home/user/project",
            "message": {"role": "user", "content": "stored"}}
    tail = json.dumps({**line, "uuid": "u-2"}) + " " * 1200
    transcript.write_text(json.dumps(line) + "\n" + tail)
    config = write_config(tmp_path / "config.yaml", tmp_path / "state", {"claude": root})
    ingest = await asyncio.create_subprocess_exec(
        *memoryd_command("--config", str(config), "ingest", "--once"),
        env=daemon_env(tmp_path), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    assert await ingest.wait() == 0
    old = time.time() - 60
    os.utime(transcript, (old, old))
    settings = load_settings(config)
    clock = SystemClock()

    async def provide() -> Any:
        raise AssertionError("the overview needs no operations")

    async def status() -> dict[str, Any]:
        return await collect_status(settings, clock)

    server = UiServer(ViewerData(settings, clock, provide, status), idle_timeout=None)
    await server.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=base) as client:
            await client.get(server.url[len(base):])
            page = (await client.get("/")).text
    finally:
        await server.stop()
    assert f"<td class=\"num\">{len(tail):,} B</td>" in page, page
    assert f"held back: a partial last line (no newline at its end) in {transcript}" in page


def test_dates_are_what_a_memory_is_about_and_nothing_overflows(tmp_path: Path,
                                                                browser: Any) -> None:
    """Issue 36.13: a conversation of 2025-10-21 was shown as of the day it was stored;
    an empty chart read "1 messages" over empty axes; the state path overflowed its card
    at 1280 px. In a real browser: the day it is about, the stored day beside it only
    when it differs, one sentence for an empty chart, and every card holds its text."""
    (tmp_path / "claude" / "-home-user-shop").mkdir(parents=True)
    old = datetime(2025, 10, 21, 9, 30, tzinfo=UTC)
    (tmp_path / "claude" / "-home-user-shop" / "old.jsonl").write_text(
        claude_line("old-session", "o1", "user", "the invoice service retries refunds twice",
                    old)
        + claude_line("old-session", "o2", "assistant", "noted: refunds are retried twice",
                      old + timedelta(seconds=5)))
    with quick_daemon(tmp_path) as daemon:
        assert daemon.cli("ingest", "--once").returncode == 0
        assert daemon.cli("sync").returncode == 0
        daemon.start()
        url = _viewer_url(daemon)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        overflowing = page.eval_on_selector_all(
            ".card", "cards => cards.filter(c => c.scrollWidth > c.clientWidth).length")
        assert overflowing == 0
        chart = page.request.get(f"{_base(url)}/chart.svg?what=messages").text()
        assert "no messages in the last" in chart and "1 messages" not in chart
        page.goto(f"{_base(url)}/memories?q=invoice+refunds")
        result = page.locator(".result").first.inner_text()
        assert "2025-10-21" in result, result
        today = datetime.now(UTC).strftime("%Y-%m-%d")
        assert f"stored {today}" in result, result
