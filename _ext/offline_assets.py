"""Serve MathJax, require.js, the Jupyter widget manager and Vega-Lite from the book itself.

By default the HTML loads MathJax and the widget manager from CDNs, so an offline reader sees
raw TeX and no widgets. This extension takes them from ``node_modules/`` (installed by
``npm ci`` from ``package.json``) and ships them under ``_static/``:

    _static/mathjax/                   MathJax 3 ``es5/`` (loader, components, fonts)
    _static/requirejs/require.js       AMD loader that ``embed-amd.js`` needs
    _static/html-manager/              ``@jupyter-widgets/html-manager`` ``embed-amd.js`` + fonts
    _static/widgets-offline.js         require.js config + a MathJax 2 shim for the widgets
    _static/vega/                      ``vega``, ``vega-lite`` and ``vega-embed`` (minified UMD builds)
    _static/osm-figures.js             draws the pages' interactive figures (specs written by
                                       ``onlinesoftmax/book/widgets/interactive.py``) with vega-embed

The Vega files and ``osm-figures.js`` are added only to pages that hold a figure spec, and before
require.js: a UMD bundle loaded after require.js registers itself as an anonymous AMD module
instead of setting its global (``vega``, ``vegaLite``, ``vegaEmbed``).

Why not a ``_static/`` folder in the repository: jupyter-book 1.x adds *every* ``.js`` under
its static paths as a ``<script>`` on every page. Paths added here, at ``config-inited``, come
after that scan. The files are staged as symlinks in ``_build/offline_static/`` and Sphinx
copies them into ``_build/html/_static/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError
from sphinx.util import logging

logger = logging.getLogger(__name__)

MATHJAX_ENTRY = "mathjax/tex-mml-chtml.js"
REQUIREJS_ENTRY = "requirejs/require.js"
WIDGETS_SHIM_ENTRY = "widgets-offline.js"
EMBED_AMD_ENTRY = "html-manager/embed-amd.js"
FIGURES_ENTRY = "osm-figures.js"
# (staged name, file in node_modules), in load order; each needs the ones before it.
VEGA_FILES = (
    ("vega/vega.min.js", "vega/build/vega.min.js"),
    ("vega/vega-lite.min.js", "vega-lite/build/vega-lite.min.js"),
    ("vega/vega-embed.min.js", "vega-embed/build/vega-embed.min.js"),
)
FIGURE_MARKER = 'class="osm-figure-spec"'
# Before myst-nb's widget scripts (priority 500), after the theme's.
VEGA_PRIORITY = 450

# Loaded before require.js, on pages with widgets.
# 1. A global ``require`` object is read by require.js as its config. Each bundle in embed-amd.js
#    (html-manager, base, controls, their 7.x twins, libembed-amd) computes the URL of its icon
#    fonts from its own module id, so map every '@jupyter-widgets/...' id into our copy (the
#    longer '.../html-manager/dist' prefix wins for libembed-amd). Unmapped, an id resolves
#    beside the page, and whichever bundle's @font-face rules load last decide whether the
#    icons' fonts are found. The base URL comes from this script's own address (any page depth).
# 2. The widget controls typeset descriptions with the MathJax 2 API (``MathJax.Hub.Queue``);
#    with MathJax 3 on the page that throws "reading 'Queue'". Give MathJax 3 a small ``Hub``
#    that forwards to ``typesetPromise``. MathJax's deferred script has run by DOMContentLoaded,
#    and this listener is registered before embed-amd.js's.
WIDGETS_SHIM_JS = """\
// Written by _ext/offline_assets.py. Must load before require.js and embed-amd.js.
(function () {
  var here = document.currentScript.src;
  var staticBase = here.substring(0, here.lastIndexOf("/") + 1);
  window.require = {
    paths: {
      "@jupyter-widgets/html-manager/dist": staticBase + "html-manager",
      "@jupyter-widgets": staticBase + "html-manager",
    },
  };
  document.addEventListener("DOMContentLoaded", function () {
    var mathjax = window.MathJax;
    if (!mathjax || !mathjax.version || mathjax.version.charAt(0) !== "3" || mathjax.Hub) return;
    mathjax.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (job) {
          if (!Array.isArray(job) || job[0] !== "Typeset") return;
          var elements = job[2] ? [job[2]] : undefined;
          mathjax.startup.promise = mathjax.startup.promise.then(function () {
            return mathjax.typesetPromise(elements);
          });
        });
      },
    };
  });
})();
"""


# Draws every figure spec of the page. Vega's warnings (a field that is not in the data, a scale
# that cannot be built) are reported as console errors, so that the browser check fails on them.
FIGURES_JS = """\
// Written by _ext/offline_assets.py: draws the page's interactive figures with vega-embed.
(function () {
  window.osmFigures = {};
  var style = document.createElement("style");
  style.textContent = [
    ".osm-figure { margin: 1em 0 1.5em; overflow-x: auto; }",
    // the controls above the figure, in a row
    ".osm-figure.vega-embed { display: flex; flex-direction: column-reverse; align-items: flex-start; }",
    ".osm-figure .vega-bindings { display: flex; flex-wrap: wrap; gap: 0.3em 1.6em; margin: 0 0 0.6em;" +
    " font-size: 0.9em; }",
    ".osm-figure .vega-bind-name { font-weight: 600; margin-right: 0.3em; }",
  ].join(" ");
  document.head.appendChild(style);
  function logger(id) {
    var level = 2;
    function report(kind) {
      return function () {
        console.error("osm-figures: " + id + ": vega " + kind + ": " +
                      Array.prototype.map.call(arguments, String).join(" "));
        return this;
      };
    }
    return {
      level: function (value) { if (arguments.length) { level = value; return this; } return level; },
      error: report("error"),
      // A layer with nothing to draw at this setting (no torch row for this shape, say) has an
      // empty extent, and a log axis with no data an empty domain: not faults of the spec.
      // Every other warning is.
      warn: function (message) {
        var text = String(message);
        if (text.indexOf("Infinite extent") === 0 || text === "Log scale domain includes zero: [,]") return this;
        return report("warning").apply(this, arguments);
      },
      info: function () { return this; }, debug: function () { return this; },
    };
  }
  function draw() {
    document.querySelectorAll("script.osm-figure-spec").forEach(function (script) {
      var id = script.getAttribute("data-target");
      var target = document.getElementById(id);
      if (!target) { console.error("osm-figures: no element #" + id); return; }
      var spec;
      try { spec = JSON.parse(script.textContent); }
      catch (error) { console.error("osm-figures: " + id + ": " + error); return; }
      vegaEmbed(target, spec, { renderer: "svg", actions: false, logger: logger(id) })
        .then(function (result) {
          window.osmFigures[id] = result.view;
          target.setAttribute("data-osm-rendered", "true");
        })
        .catch(function (error) {
          target.setAttribute("data-osm-rendered", "error");
          console.error("osm-figures: " + id + ": " + error);
        });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
"""


def _find_node_modules(app: Sphinx) -> Path:
    candidates = [Path(app.srcdir) / "node_modules", Path(app.confdir) / "node_modules"]
    for candidate in candidates:
        if (candidate / "mathjax" / "es5" / "tex-mml-chtml.js").is_file():
            return candidate
    raise ConfigError(
        "offline_assets: MathJax not found in node_modules/ (looked in "
        + ", ".join(str(c) for c in candidates)
        + "). Run `npm ci` at the repository root (or `make book`, which does it)."
    )


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        link.unlink()
    link.symlink_to(target)


def _stage(node_modules: Path, staging: Path) -> None:
    """Lay out the static tree as symlinks into node_modules (Sphinx follows them when copying)."""
    mathjax = node_modules / "mathjax" / "es5"
    requirejs = node_modules / "requirejs" / "require.js"
    html_manager = node_modules / "@jupyter-widgets" / "html-manager" / "dist"
    for needed in (requirejs, html_manager / "embed-amd.js"):
        if not needed.is_file():
            raise ConfigError(f"offline_assets: {needed} is missing; run `npm ci`.")

    staging.mkdir(parents=True, exist_ok=True)
    _link(mathjax.resolve(), staging / "mathjax")
    (staging / "requirejs").mkdir(exist_ok=True)
    _link(requirejs.resolve(), staging / "requirejs" / "require.js")

    # embed-amd.js plus its font files; skip embed.js, libembed-amd.js and the source map
    # (about 12 MB that no page loads).
    manager_dir = staging / "html-manager"
    manager_dir.mkdir(exist_ok=True)
    font_suffixes = {".woff2", ".woff", ".ttf", ".eot", ".svg"}
    for source in sorted(html_manager.iterdir()):
        if source.name == "embed-amd.js" or source.suffix in font_suffixes:
            _link(source.resolve(), manager_dir / source.name)

    (staging / "vega").mkdir(exist_ok=True)
    for staged, source in VEGA_FILES:
        if not (node_modules / source).is_file():
            raise ConfigError(f"offline_assets: {node_modules / source} is missing; run `npm ci`.")
        _link((node_modules / source).resolve(), staging / staged)

    for entry, text in ((WIDGETS_SHIM_ENTRY, WIDGETS_SHIM_JS), (FIGURES_ENTRY, FIGURES_JS)):
        written = staging / entry
        if not written.is_file() or written.read_text() != text:
            written.write_text(text)


def configure_offline_assets(app: Sphinx, config: Config) -> None:
    node_modules = _find_node_modules(app)
    staging = Path(app.outdir).parent / "offline_static"
    _stage(node_modules, staging)

    config.html_static_path = [*config.html_static_path, str(staging)]
    # Relative paths are served from _static/ by Sphinx.
    config.mathjax_path = MATHJAX_ENTRY
    # myst-nb adds these, in this order, to pages that carry widget state.
    config.nb_ipywidgets_js = {
        WIDGETS_SHIM_ENTRY: {},
        REQUIREJS_ENTRY: {},
        EMBED_AMD_ENTRY: {},
    }
    logger.info("offline_assets: MathJax, require.js, html-manager and Vega from %s", node_modules)


def add_figure_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """Vega-Lite and the figure loader, on the pages that hold an interactive figure only."""
    if FIGURE_MARKER not in (context.get("body") or ""):
        return
    for staged, _ in VEGA_FILES:
        app.add_js_file(staged, priority=VEGA_PRIORITY)
    app.add_js_file(FIGURES_ENTRY, priority=VEGA_PRIORITY)


def drop_duplicate_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    """Keep the first of two identical <script> entries on a page.

    Under Sphinx 7.4 an inline script added with ``app.add_js_file(None, body=...)`` after the
    builder started is not recognised as a duplicate of the same script registered earlier
    (filename None vs ''). sphinx-thebe and sphinx-togglebutton hit this, and the second
    ``const THEBE_JS_URL = ...`` throws "Identifier has already been declared" on every page.
    """
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen: set = set()
    unique = []
    for script in scripts:
        attributes = getattr(script, "attributes", {}) or {}
        key = (
            getattr(script, "filename", script) or "",
            getattr(script, "priority", 500),
            tuple(sorted((str(k), str(v)) for k, v in attributes.items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def setup(app: Sphinx) -> dict:
    # Run before myst-nb reads nb_* settings (it does so at builder-inited).
    app.connect("config-inited", configure_offline_assets, priority=400)
    app.connect("html-page-context", add_figure_scripts)
    # After the other extensions have added their per-page scripts.
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
