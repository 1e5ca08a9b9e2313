"""The built book in headless Chromium: pages render, outputs, figures, exercises, links, offline."""

import os
from urllib.parse import urldefrag, urlparse

import pytest

from test_book_build import ROOT, toc_pages

from conftest import CHROMIUM, CHROMIUM_ARGS as ARGS

# Lessons whose executed cells draw plots (matplotlib images must be in the page).
PAGES_WITH_PLOTS = ["notebooks/03_allreduce", "notebooks/06_timeline", "notebooks/07_performance"]


@pytest.fixture(scope="module")
def pages(book_url):
    """Visit every page once; record what the tests need."""
    from playwright.sync_api import sync_playwright

    visited = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page()
        external = []
        page.on(
            "request",
            lambda r: (
                external.append(r.url)
                if urlparse(r.url).hostname not in ("127.0.0.1", None)
                and not r.url.startswith("data:")
                else None
            ),
        )
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        for name in toc_pages():
            external.clear()
            errors.clear()
            page.goto(f"{book_url}/{name}.html", wait_until="networkidle")
            page.wait_for_timeout(300)
            visited[name] = page.evaluate("""() => ({
                title: document.querySelector('h1') ? document.querySelector('h1').innerText : '',
                outputs: document.querySelectorAll('.cell_output').length,
                plots: [...document.querySelectorAll('.cell_output img')].filter(i => i.naturalWidth > 0).length,
                brokenImages: [...document.querySelectorAll('img')].filter(i => !i.complete || i.naturalWidth === 0)
                              .map(i => i.src),
                diagrams: document.querySelectorAll('.graphviz, object[type="image/svg+xml"], img[src$=".svg"]').length,
                exercises: document.querySelectorAll('div.exercise').length,
                solutions: document.querySelectorAll('div.solution').length,
                exerciseMarkers: (document.body.innerText.match(/```\\{exercise\\}|```\\{solution/g) || []).length,
                mathSource: document.querySelectorAll('.math').length,
                mathRendered: document.querySelectorAll('mjx-container').length,
                links: [...document.querySelectorAll('a[href]')].map(a => a.href),
                ids: [...document.querySelectorAll('[id]')].map(e => e.id),
            })""")
            visited[name]["external"] = list(external)
            visited[name]["errors"] = list(errors)
        browser.close()
    return visited


def test_every_page_renders_with_a_title(pages):
    assert all(info["title"].strip() for info in pages.values())


def test_every_lesson_shows_code_outputs(pages):
    empty = [n for n, i in pages.items() if n.startswith("notebooks/") and i["outputs"] == 0]
    assert not empty


@pytest.mark.parametrize("name", PAGES_WITH_PLOTS)
def test_plot_lessons_show_their_figures(pages, name):
    assert pages[name]["plots"] >= 1


def test_no_image_is_broken(pages):
    broken = {n: i["brokenImages"] for n, i in pages.items() if i["brokenImages"]}
    assert not broken


def test_exercise_and_solution_blocks_render(pages):
    for name, info in pages.items():
        if name.startswith("notebooks/"):
            assert info["exercises"] >= 1 and info["solutions"] >= 1, name
        assert info["exerciseMarkers"] == 0, f"{name}: raw exercise markup shown"


def test_math_renders_offline(pages):
    unrendered = [n for n, i in pages.items() if i["mathSource"] and not i["mathRendered"]]
    assert not unrendered


def test_nothing_is_loaded_from_outside_localhost(pages):
    external = {n: i["external"] for n, i in pages.items() if i["external"]}
    assert not external


def test_no_javascript_errors(pages):
    errors = {n: i["errors"] for n, i in pages.items() if i["errors"]}
    assert not errors


def test_no_broken_internal_links(pages, book_url):
    by_path = {f"{book_url}/{n}.html": i for n, i in pages.items()}
    broken = []
    for name, info in pages.items():
        for link in info["links"]:
            if not link.startswith(book_url):
                continue
            target, anchor = urldefrag(link)
            path = urlparse(target).path.lstrip("/")
            if not os.path.exists(os.path.join(ROOT, "_build", "html", path)):
                broken.append((name, link))
            elif anchor and target in by_path and anchor not in by_path[target]["ids"]:
                broken.append((name, link))
    assert not broken
