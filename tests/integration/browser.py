"""A real headless Chromium for the HTML report tests (Debian's ``chromium``, driven by playwright).

``scripts/test.sh`` installs the browser when it is missing; playwright never downloads one.
Every page is opened from a file:// URL with every other request recorded and refused, and its
console messages and uncaught errors collected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("TRAINGUARD_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@dataclass
class Opened:
    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def other_requests(self) -> list[str]:
        return [u for u in self.requests if u != self.page.url]


def launch():
    """(playwright, browser) for a test module; fails plainly when the browser is missing."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: run scripts/test.sh (it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    return pw, browser


def open_file(browser: Any, path: Path, *, width: int = 1280, height: int = 900) -> Opened:
    """Open ``path`` in a fresh context; wait until the page's script has run."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    opened = Opened(page)
    page.on("console", lambda m: opened.console.append((m.type, m.text)))
    page.on("pageerror", lambda e: opened.errors.append(str(e)))
    page.on("request", lambda r: opened.requests.append(r.url))
    url = path.resolve().as_uri()

    def refuse(route: Any) -> None:
        if route.request.url == url:
            route.continue_()
        else:
            route.abort()

    page.route("**/*", refuse)
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=15_000)
    return opened
