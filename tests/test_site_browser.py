"""The report page in a real browser: headless Chromium driven by Playwright.

Renders the site from the published results and checks, as a reader's browser shows it, that the
tables render with their verdict colours, that every image loads, and that no link is broken
(relative links must point at files of the site; outside links must be well-formed and every paper
page must link to the paper). Skipped where Playwright or a Chromium binary is missing: Debian's
``chromium`` package, or ``ICLR26_CHROMIUM=/path/to/chrome``.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

CHROMIUM = os.environ.get("ICLR26_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary (apt install chromium, or set ICLR26_CHROMIUM)"),
              pytest.mark.xdist_group("site")]  # one worker renders the site once

# the verdict colours of the page's style sheet, as the browser reports them
COLOURS = {"reproduced": "rgb(217, 242, 217)", "reproducedsmaller": "rgb(238, 246, 208)",
           "notreproduced": "rgb(255, 243, 205)",
           "inconclusive": "rgb(231, 238, 247)", "contradicted": "rgb(248, 215, 218)",
           "error": "rgb(248, 215, 218)"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from iclr26.harness.report import build_report
    from iclr26.harness.store import PUBLISHED_PATH

    if not PUBLISHED_PATH.is_file():
        pytest.skip("no published results to render")
    from iclr26.harness.store import Store

    out = tmp_path_factory.mktemp("site")
    mine = out.parent / (out.name + "_runs.sqlite")  # the user's own runs: crc's published trials, copied
    with Store(PUBLISHED_PATH, readonly=True) as pub, Store(mine) as st:
        for t in pub.latest_trials("crc", "quick"):
            st.put_trial(t)
    build_report(out, store_path=mine, published_path=PUBLISHED_PATH)
    return out


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _open(browser, path: Path):
    page = browser.new_page()
    failed = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, failed


def _check_page(page, failed, here: Path, site: Path) -> list[str]:
    problems = [f"request failed: {u}" for u in failed]
    images = page.evaluate("Array.from(document.images).map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])")
    problems += [f"image not rendered: {src}" for src, complete, width in images if not (complete and width > 0)]
    for href in page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href'))"):
        url = urlparse(href)
        if url.scheme in ("http", "https"):
            if url.scheme != "https" or not url.hostname or "." not in url.hostname:
                problems.append(f"odd outside link: {href}")
            elif url.hostname == "arxiv.org" and not re.fullmatch(r"/abs/\d{4}\.\d{4,5}(v\d+)?", url.path):
                problems.append(f"not an arXiv abstract link: {href}")
        elif url.scheme:
            problems.append(f"unexpected link scheme: {href}")
        else:
            target = (here.parent / unquote(url.path)).resolve()
            if not target.is_file() or site.resolve() not in target.parents:
                problems.append(f"broken link: {href}")
    for cls, want in COLOURS.items():
        got = page.evaluate(f"Array.from(document.querySelectorAll('.{cls}')).map(e => getComputedStyle(e).backgroundColor)")
        problems += [f".{cls} shown as {g}, not {want}" for g in got if g != want]
    return problems


def test_index_renders_with_colours_images_and_working_links(site, browser):
    page, failed = _open(browser, site / "index.html")
    assert page.evaluate("document.querySelectorAll('#papers tr').length") == 76 + 1  # header + every paper
    assert page.evaluate("document.images.length") >= 1  # the overview figure
    shown = page.evaluate("Array.from(document.querySelectorAll('td span')).map(s => s.className)")
    assert {"reproduced", "inconclusive"} <= set(shown)  # verdicts are coloured by class
    assert _check_page(page, failed, site / "index.html", site) == []
    page.close()


def test_the_index_shows_your_runs(site, browser):
    page, _ = _open(browser, site / "index.html")
    section = page.locator("#your-runs")
    assert section.is_visible()
    rows = page.evaluate("Array.from(document.querySelectorAll('#your-runs-table tr')).map(r => r.innerText)")
    assert len(rows) == 2 and rows[1].startswith("crc")  # header + the one paper run
    assert "claims reproduced" in rows[1]
    link = page.evaluate("document.querySelector('#your-runs-table a').getAttribute('href')")
    assert link == "papers/crc.html"
    page.close()


def test_pages_fit_a_1400_px_window(site, browser):
    """No page is wider than the window: long cells wrap, the verdict column stays on screen."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    wide = {}
    for path in [site / "index.html"] + sorted((site / "papers").glob("*.html")):
        page.goto(path.as_uri())
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 1400:
            wide[path.stem] = width
    page.close()
    assert wide == {}


def test_every_paper_page_renders_and_links_to_the_paper(site, browser):
    pages = sorted((site / "papers").glob("*.html"))
    assert len(pages) >= 20
    problems = {}
    for path in pages:
        page, failed = _open(browser, path)
        found = _check_page(page, failed, path, site)
        rows = page.evaluate("document.querySelectorAll('table tr').length")
        if rows < 2:
            found.append("no claim table")
        links = page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.href)")
        if not any(urlparse(u).hostname in ("arxiv.org", "openreview.net") for u in links):
            found.append("no link to the paper (arXiv or OpenReview)")
        if found:
            problems[path.stem] = found
        page.close()
    assert problems == {}
