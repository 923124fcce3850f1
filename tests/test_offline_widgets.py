"""The offline widget manager finds its icon fonts, and the browser check notices when it does not.

Each bundle inside ``embed-amd.js`` places its Font Awesome files beside its own AMD module id as
require.js resolves it. The shim's ``paths`` must send every ``@jupyter-widgets/...`` id into the
staged ``html-manager/`` folder; an id left unmapped resolves beside the page, where no font is.
"""

import re
import sys

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
