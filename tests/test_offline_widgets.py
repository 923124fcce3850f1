"""The offline widget manager finds its icon fonts, and the browser check notices when it does not.

Each bundle inside ``embed-amd.js`` places its Font Awesome files beside its own AMD module id as
require.js resolves it. The shim's ``paths`` must send every ``@jupyter-widgets/...`` id into the
staged ``html-manager/`` folder; an id left unmapped resolves beside the page, where no font is.
"""

import re
import sys
from pathlib import Path

import pytest

from onlinesoftmax.runtime.loader import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "_ext"))
try:
    import offline_assets
finally:
    sys.path.pop(0)

EMBED_AMD = REPO_ROOT / "node_modules" / "@jupyter-widgets" / "html-manager" / "dist" / "embed-amd.js"
STATIC = "http://book/_static/"
PAGE_DIR = "http://book/chapters/"


def shim_paths(shim_js: str) -> dict[str, str]:
    """The shim's require.js ``paths``, with ``staticBase`` written out."""
    block = re.search(r"paths:\s*\{(.*?)\}", shim_js, re.S).group(1)
    return {key: STATIC + value for key, value in re.findall(r'"([^"]+)":\s*staticBase \+ "([^"]*)"', block)}


def module_dir(module_id: str, paths: dict[str, str]) -> str:
    """The folder require.js gives a module id: the longest mapped prefix wins; none: beside the page."""
    for prefix in sorted(paths, key=len, reverse=True):
        if module_id == prefix or module_id.startswith(prefix + "/"):
            url = paths[prefix] + module_id[len(prefix):] + ".js"
            return url[: url.rindex("/") + 1]
    return PAGE_DIR + module_id[: module_id.rindex("/") + 1]


def defined_ids() -> list[str]:
    if not EMBED_AMD.is_file():
        pytest.skip("node_modules not installed (npm ci)")
    return sorted(set(re.findall(r'define\("(@jupyter-widgets/[^"]+)"', EMBED_AMD.read_text())))


def test_every_bundle_finds_its_fonts_in_the_staged_folder():
    ids = defined_ids()
    assert {"@jupyter-widgets/base", "@jupyter-widgets/controls", "@jupyter-widgets/html-manager"} <= set(ids)
    paths = shim_paths(offline_assets.WIDGETS_SHIM_JS)
    assert {module_id: module_dir(module_id, paths) for module_id in ids} == {
        module_id: STATIC + "html-manager/" for module_id in ids}


def test_a_shim_that_maps_only_the_dist_folder_is_caught():
    # The shim as it was: base, controls and html-manager resolved beside the page.
    old = offline_assets.WIDGETS_SHIM_JS.replace(
        '"@jupyter-widgets": staticBase + "html-manager",', "")
    paths = shim_paths(old)
    assert list(paths) == ["@jupyter-widgets/html-manager/dist"]
    beside_page = [module_id for module_id in defined_ids()
                   if module_dir(module_id, paths) == PAGE_DIR + "@jupyter-widgets/"]
    assert "@jupyter-widgets/base" in beside_page and "@jupyter-widgets/controls" in beside_page


def test_the_browser_check_names_fonts_that_are_not_in_the_book(tmp_path):
    pytest.importorskip("playwright")
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    try:
        import browser_check
    finally:
        sys.path.pop(0)
    (tmp_path / "_static" / "html-manager").mkdir(parents=True)
    (tmp_path / "_static" / "html-manager" / "a.woff2").write_bytes(b"font")
    base = "http://127.0.0.1:8000/"
    found = base + "_static/html-manager/a.woff2"
    beside_page = base + "chapters/@jupyter-widgets/a.woff2"
    elsewhere = "https://cdn.example.org/_static/html-manager/a.woff2"
    folder = base + "_static/html-manager/"
    assert browser_check.missing_fonts([found], base, tmp_path) == []
    assert browser_check.missing_fonts([found, beside_page, elsewhere, folder], base, tmp_path) == [
        beside_page, elsewhere, folder]


def test_the_browser_check_names_a_request_that_hangs_and_passes_a_page_that_finishes(tmp_path, monkeypatch):
    """The wrong answer: a page whose fetch never completes passes (or fails without saying which
    request). A finished page must pass even when Playwright's idle signal is slow to come."""
    pytest.importorskip("playwright")
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    try:
        import browser_check
    finally:
        sys.path.pop(0)
    import http.server
    import threading

    from playwright.sync_api import sync_playwright

    try:
        chromium = browser_check.find_chromium()
    except SystemExit:
        pytest.skip("no Chromium on this machine")
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/hang":
                release.wait(20)  # answers only when the test ends
            body = (b"<html><body><p>page</p><script>fetch('/hang')</script></body></html>"
                    if self.path == "/hanging.html" else b"<html><body><p>page</p></body></html>")
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    monkeypatch.setattr(browser_check, "RENDER_TIMEOUT_MS", 1500)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                                 args=browser_check.CHROMIUM_ARGS)
            results = {}
            for name in ("hanging.html", "finished.html"):
                context = browser.new_context()
                try:
                    results[name] = browser_check.check_page(
                        context, base, Path(name), tmp_path / f"{name}.png", tmp_path)
                finally:
                    context.close()
            release.set()
            browser.close()
    finally:
        release.set()
        server.shutdown()
    assert results["finished.html"] == []
    assert any("network did not go idle" in p and p.split(": ")[1].startswith(base + "hang")
               for p in results["hanging.html"]), results["hanging.html"]
