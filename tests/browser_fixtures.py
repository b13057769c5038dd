"""The browser tests' one setup: real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright.

A pytest plugin (tests/conftest.py loads it): `chromium` is one browser for a test module, `tabs` a test's pages in
it, each in its own context (no cookie, storage or cache shared with another test), opened on a real server's page
and waited for until its socket is open (#conn.ok), with the errors the page raised. `wait_js` waits for the
page's state.

While a module's browser is open, its Playwright marks the test thread's asyncio loop as running: asyncio.run()
refuses to start under it. A module that uses both runs its asyncio.run() tests before its first browser test.
"""
from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]
CONNECTED = "#conn.ok"  # the page's socket is open (web/connection.js)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """One Chromium for the module's tests: a launch costs 0.5 s, a new context 0.2 s."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Tabs:
    """Pages of one browser, each in a context of its own; close() closes those still open."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.opened: list[Page] = []

    def new(self, **options: Any) -> tuple[Page, list[str]]:
        """A blank page (options: Browser.new_page's, a viewport or accept_downloads) and the list its errors
        (pageerror) go to. Listeners a test needs from the first request on are added before load()."""
        page = self.browser.new_page(**options)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        self.opened.append(page)
        return page, errors

    def load(self, page: Page, url: str) -> None:
        """Go to url and wait until the page's socket is connected."""
        page.goto(url)
        page.wait_for_selector(CONNECTED)

    def open(self, addr: str, **options: Any) -> tuple[Page, list[str]]:
        """The page of the server at addr ("host:port"), connected, and its errors."""
        page, errors = self.new(**options)
        self.load(page, f"http://{addr}/")
        return page, errors

    def close(self) -> None:
        for page in self.opened:
            if not page.is_closed():
                page.close()  # a page from Browser.new_page closes its context with it
        self.opened.clear()


@pytest.fixture
def tabs(chromium: Browser) -> Iterator[Tabs]:
    """The test's pages in the module's Chromium, closed at its end, passed or failed."""
    opened = Tabs(chromium)
    try:
        yield opened
    finally:
        opened.close()


@contextlib.contextmanager
def script_page(tabs: Tabs, w: Any, data_dir: Path) -> Iterator[tuple[Page, list[str]]]:
    """serve(w)'s page open in a tab: the page and the errors it raised; the watch removed at the end."""
    from previewlab.server.embedded import serve

    served = serve(w, port=0, data_dir=data_dir)
    try:
        page, errors = tabs.new()
        try:
            tabs.load(page, served.url)
            yield page, errors
        finally:
            page.close()  # before the server goes: its shutdown waits for no open socket
    finally:
        w.remove()


def wait_js(page: Page, expression: str, timeout_s: float = 60) -> None:
    """Wait until a predicate holds in the page. page.wait_for_function evaluates it with eval() inside the page,
    which the page's Content-Security-Policy (script-src 'self') forbids; page.evaluate goes through the debugger
    instead."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {expression}")
        time.sleep(0.05)
