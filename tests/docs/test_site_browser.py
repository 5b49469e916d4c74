"""The built site in a real headless Chromium, served by a local HTTP server as a reader's machine would.

Every page opens with no script error and no request leaving the local server; every internal link
points at a page of the site, and every link with a fragment at an element that has that id; and
Material's search, which runs in the browser on the prebuilt index, finds the leak check's page.
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from browser import launch  # noqa: E402  (tests/integration/browser.py: Debian's chromium via playwright)

pytest.importorskip("playwright")

pytestmark = pytest.mark.slow  # a browser over every page: about half a minute on 2 cores


class _Ids(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):  # noqa: ANN001 - HTMLParser's signature
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.ids.add(value)


@functools.cache
def _ids(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text())
    return frozenset(parser.ids)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: ANN002
        pass


@pytest.fixture(scope="module")
def served(built_site):
    handler = functools.partial(_Quiet, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield built_site, f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="module")
def browser():
    pw, chromium = launch()
    yield chromium
    chromium.close()
    pw.stop()


def _open(browser, base: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    outside: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    def only_local(route):  # noqa: ANN001
        if route.request.url.startswith(base):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    return context, page, errors, outside


def test_every_internal_link_resolves(served, browser) -> None:
    site, base = served
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if p.name != "404.html")
    context, page, errors, outside = _open(browser, base)
    broken: list[str] = []
    checked = 0
    try:
        for rel in pages:
            page.goto(base + rel)
            page.wait_for_load_state("load")
            hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
            for href in hrefs:
                if not href.startswith(base):
                    continue  # the outside world (GitHub, submitit's page): not fetched
                url, fragment = urldefrag(href)
                target = site / unquote(urlparse(url).path).lstrip("/")
                if target.is_dir():
                    target = target / "index.html"
                checked += 1
                if not target.is_file():
                    broken.append(f"{rel} -> {href} (no such page)")
                elif fragment and target.suffix == ".html" and unquote(fragment) not in _ids(target):
                    broken.append(f"{rel} -> {href} (no element with id {fragment!r})")
    finally:
        context.close()
    assert len(pages) > 40 and checked > 1000, (len(pages), checked)
    assert not broken, "broken internal links:\n" + "\n".join(broken[:50])
    assert not errors, errors
    # the site needs nothing from the network: fonts and scripts are served with it
    assert not [u for u in outside if not u.startswith(("https://fonts.", "data:"))], outside


def test_search_works_offline(served, browser) -> None:
    _, base = served
    context, page, errors, outside = _open(browser, base)
    try:
        page.goto(base + "index.html")
        page.keyboard.press("/")  # Material's shortcut focuses the search box
        box = page.locator("input.md-search__input")
        box.press_sequentially("leakcheck")  # typed key by key: Material searches on each key
        results = page.locator(".md-search-result__item")
        results.first.wait_for(timeout=30_000)
        links = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(e => e.href)")
        assert any("how-to/leakcheck.html" in link for link in links), links
        box.fill("")
        box.press_sequentially("pilot jobs Slurm")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.md-search-result__item a')].some(a => a.href.includes('how-to/slurm.html'))",
            timeout=30_000,
        )
    finally:
        context.close()
    assert not errors, errors
