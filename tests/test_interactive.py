"""The static page's interactive figures (onlinesoftmax/book/widgets/interactive.py, interactive_rules.py,
counterparts.py): a spec is built from its table, follows the book's figure rule, and a spec that
breaks the rule is rejected (CPU tier; the browser check moves the controls of the built pages)."""
import copy
import json
import sys

import numpy as np
import pytest

from onlinesoftmax import checks
from onlinesoftmax.book.readings import counterparts, figures
from onlinesoftmax.book.widgets import interactive
from onlinesoftmax.book.widgets.interactive_rules import check, schema_problems, table, visible
from onlinesoftmax.runtime.loader import REPO_ROOT

HAS_SCHEMA = (REPO_ROOT / "node_modules" / "vega-lite" / "build" / "vega-lite-schema.json").is_file()


def small_figure() -> interactive.Figure:
    """Two panels, a dropdown and a slider; one kernel recorded at two batches, a model error."""
    fig = interactive.Figure("test", "A test figure",
                             [interactive.select("batch", "batch", [10, 4000], 4000),
                              interactive.slider("n", "n", 1, 3, value=2)], caption="for the tests")
    speed = fig.panel("speed", x="N", y="GB/s", x_scale="log2")
    error = fig.panel("error", x="", y="error", x_scale="ordinal", y_scale="log")
    for batch in (10, 4000):
        fig.series(speed, "softmax_02_online (recorded)", [256, 1024], [batch / 10, batch / 5],
                   source="recorded", when={"batch": batch})
        fig.series(speed, "copy (recorded)", ys=[batch], mark="rule_y", source="recorded", when={"batch": batch})
        fig.note(f"batch {batch}", when={"batch": batch})
    for n in (1, 2, 3):
        fig.series(error, "softmax_02_online (NumPy model)", ["kernel"], [10.0 ** -n], mark="bar", when={"n": n})
    return fig


def test_the_spec_is_built_from_the_table():
    fig = small_figure()
    spec = fig.spec()
    assert check(spec) == []
    rows = table(spec)
    shown = visible(rows, {"batch": 10, "n": 3})
    kernel = [r for r in shown if r["series"] == "softmax_02_online (recorded)"]
    assert len(kernel) == 1 and kernel[0]["x"] == [256, 1024] and kernel[0]["y"] == [1, 2]
    assert kernel[0]["color"] == figures.color("softmax_02_online")           # the palette's, unasked
    assert [r["y"] for r in shown if r["panel"] == "error"] == [[0.001]]
    assert [r["text"] for r in shown if r["mark"] == "text"] == [["batch 10"]]
    assert {p["name"] for p in spec["params"]} == {"ctl_batch", "ctl_n"}
    html = fig.html()
    assert 'class="osm-figure-spec"' in html and json.loads(html.split('data-target="osm-figure-test">')[1]
                                                           .split("</script>")[0]) == spec


@pytest.mark.skipif(not HAS_SCHEMA, reason="node_modules/ is not installed (npm ci)")
def test_the_schema_of_the_installed_vega_lite_judges_the_spec():
    spec = small_figure().spec()
    assert schema_problems(spec) == []
    spec["vconcat"][0]["hconcat"][0]["layer"][0]["mark"]["type"] = "lines"
    assert any("not a valid Vega-Lite spec" in p for p in schema_problems(spec))


def _break(spec: dict, fault: str) -> dict:
    spec = copy.deepcopy(spec)
    series = next(t for t in spec["transform"] if "lookup" in t)["from"]["data"]["values"]
    kernel = next(s for s in series if s["series"].startswith("softmax_02_online (recorded"))
    legend = spec["vconcat"][0]["hconcat"][0]["layer"][-1]["encoding"]["color"]
    if fault == "colour":
        kernel["color"] = "#123456"
    elif fault == "unlabelled":
        kernel["series"] = "softmax_02_online"
    elif fault == "model labelled recorded":
        next(s for s in series if s["source"] == "model")["series"] = "softmax_02_online (recorded model)"
    elif fault == "fixed legend":
        legend["scale"]["domain"] = ["softmax_02_online (recorded)", "torch (recorded)"]
    elif fault == "hidden legend":
        legend["legend"] = None
    elif fault == "one scale":
        spec["vconcat"][0]["hconcat"][0]["layer"][0]["encoding"]["color"] = legend
    elif fault == "unfiltered":
        spec["transform"] = [t for t in spec["transform"] if "ctl_n" not in str(t.get("filter"))]
    elif fault == "unknown parameter":
        spec["transform"][0]["filter"] += " && ctl_k > 0"
    elif fault == "changes nothing":
        for value in spec["data"]["values"]:
            value.pop("c1", None)
    elif fault == "empty at start":
        spec["data"]["values"] = [v for v in spec["data"]["values"] if v.get("c1") != 2]
    elif fault == "lengths":
        next(v for v in spec["data"]["values"] if len(v["x"]) == 2)["y"].pop()
    elif fault == "scaled colour":
        spec["vconcat"][0]["hconcat"][0]["layer"][0]["encoding"]["color"]["scale"] = {"scheme": "category10"}
    elif fault == "title":
        spec["title"]["text"] = "recorded: recorded"
    elif fault == "option":
        next(v for v in spec["data"]["values"] if "c0" in v)["c0"] = 64
    elif fault == "start":
        spec["params"][0]["value"] = 7
    return spec


@pytest.mark.parametrize("fault, message", [
    ("colour", "the book's colour for softmax_02_online"),
    ("unlabelled", "must say 'recorded'"),
    ("model labelled recorded", "must say 'recorded' in its label, and only it"),
    ("fixed legend", "no fixed domain"),
    ("hidden legend", "hidden"),
    ("one scale", "exactly one legend layer"),
    ("unfiltered", "filters nothing"),
    ("unknown parameter", "'ctl_k', which no control defines"),
    ("changes nothing", "moving control 'n' changes nothing"),
    ("empty at start", "panel 'error' draws nothing"),
    ("scaled colour", "drawn in its own colour"),
    ("lengths", "2 x values against 1 y values"),
    ("title", "'recorded' more than once"),
    ("option", "batch = 64 is not an option"),
    ("start", "starts at 7"),
])
def test_a_wrong_spec_is_rejected(fault, message):
    problems = check(_break(small_figure().spec(), fault))
    assert any(message in p for p in problems), problems


def test_showing_a_figure_that_breaks_the_rule_raises():
    fig = small_figure()
    fig.series(fig.panels[0], "softmax_07_warp_per_row (recorded)", [1], [1], color="#000001", source="recorded")
    with pytest.raises(interactive.SpecError, match="softmax_07_warp_per_row"):
        fig.html()
    with pytest.raises(ValueError, match="controls it does not have"):
        bad = small_figure()
        bad.series(bad.panels[0], "x", [1], [1], color="#000000", when={"dtype": "float32"})
        bad.spec()


def test_a_series_with_nothing_to_draw_is_left_out():
    fig = small_figure()
    before = len(fig.rows)
    fig.series(fig.panels[1], "softmax_02_online (NumPy model)", ["kernel"], [float("nan")], mark="bar")
    assert len(fig.rows) == before


# --- the chapters' counterparts -------------------------------------------------------------------

def test_chapter_02_rows_with_minus_infinity():
    rows = ["2, -1, 7, 7, 0.5, 9", "3, 1, -inf, 5", "-inf, -inf, 1", "-inf"]
    spec = counterparts.rows_figure(rows).spec()
    assert check(spec) == []
    shown = visible(table(spec), {"row": "-inf, -inf, 1"})
    m = next(r for r in shown if r["series"] == "mₙ, the recurrence")
    assert m["y"] == [None, None, 1]                         # the empty state (−∞) is not drawn
    l_def = next(r for r in shown if r["series"] == "ℓₙ by the definition")
    assert l_def["y"] == [0, 0, 1]                           # the definition's sum of an all −∞ prefix is 0
    notes = [line for r in shown if r["mark"] == "text" for line in r["text"]]
    assert not any("MISMATCH" in line for line in notes) and notes[0].startswith("final state: m = 1")
    with pytest.raises(ValueError, match="not a row"):
        counterparts.rows_figure(["1, nan"])


def test_chapter_03_to_05_counterparts_follow_the_rule():
    x_row = checks.random_rows(np, 1, 2000, seed=21)
    rng = np.random.default_rng(11)
    scores = rng.standard_normal((512, 16)) @ rng.standard_normal(16)
    for fig in (counterparts.scan_figure(["1, 5, 3", "-inf, 3, 1, -inf, 5"]),
                counterparts.split_figure(x_row, most=6),
                counterparts.running_max_figure(scores, blocks=range(16, 129, 16))):
        assert check(fig.spec()) == [], fig.name
    shown = visible(table(counterparts.split_figure(x_row, most=6).spec()), {"chunks": 3})
    maxima = next(r for r in shown if r["mark"] == "bar")["y"]
    assert len(maxima) == 3 and max(maxima) == pytest.approx(float(x_row.max()), abs=1e-3)


def test_chapter_03_explorer_counterpart():
    from onlinesoftmax.book.widgets import widgets_online

    recorded = widgets_online.load_throughput()
    spec = widgets_online.explorer_figure(recorded, n_options=(256, 4096)).spec()
    assert check(spec) == []
    shown = visible(table(spec), {"kernel": "softmax_02_online", "batch": 4000, "mask": "none", "N": 4096})
    labels = {r["series"] for r in shown}
    assert "softmax_02_online (recorded)" in labels and "softmax_02_online (NumPy model)" in labels
    curve, _ = widgets_online.recorded_curve(recorded, "softmax_02_online", "none", "float32", 4000)
    drawn = next(r for r in shown if r["series"] == "softmax_02_online (recorded)")
    assert drawn["y"] == pytest.approx(list(curve[:, 1]), rel=1e-3)   # the recorded numbers, not others


def test_chapter_06_explorer_counterpart_answers_its_exercise():
    from onlinesoftmax.book.widgets import explorer, widgets_fast

    data = widgets_fast.load()
    spec = explorer.explorer_figure(data).spec()
    assert check(spec) == []
    shown = visible(table(spec), {"N": 4096, "dtype": "float32", "kernel": "softmax_08_registers"})
    batches, fractions = explorer.recorded_points(data, "softmax_08_registers", "float32", 4096)["softmax_08_registers"]
    first = next(b for b, f in zip(batches, fractions) if f >= explorer.NEAR_COPY)
    note = " ".join(line for r in shown if r["mark"] == "text" for line in r["text"])
    assert note.endswith(f"smallest at or above {explorer.NEAR_COPY} of the copy: {first}")


def test_chapter_07_and_08_counterparts():
    topk = counterparts.topk_figure(n_options=(8, 1000), dtypes=("float32",)).spec()
    assert check(topk) == []
    shown = visible(table(topk), {"N": 8, "k": 20, "dtype": "float32", "renormalize": True})
    returned = next(r for r in shown if r["mark"] == "bar_narrow")
    assert len(returned["y"]) == 8 and sum(returned["y"]) == pytest.approx(1, abs=1e-2)   # k is capped at N
    attention = counterparts.attention_figure(n_q_options=(1, 9), n_k_options=(1, 4)).spec()
    assert check(attention) == []
    for d in (32, 64):
        shown = visible(table(attention), {"n_q": 9, "n_k": 4, "d": d, "causal": True})
        band = next(r for r in shown if r["mark"] == "band_x" and r["panel"] == "out")
        assert band["x"] == [-0.5] and band["x2"] == [4.5]   # bottom-right causal: rows 0-4 see no key


def test_chapter_09_counterpart():
    from onlinesoftmax.kernels.attention import mma as am

    spec = counterparts.tensor_core_figure(n_q_options=(1, 200), n_k_options=(1, 64)).spec()
    assert check(spec) == []
    rows = table(spec)
    setting = {"n_q": 200, "n_k": 64, "d": 64, "causal": True, "step": 3}
    blind = next(r for r in visible(rows, setting) if r["series"].startswith("rows that see no key"))
    assert blind["x"] == list(range(136)) and set(blind["y"]) == {0}   # bottom-right causal: rows 0-135, O = 0
    bars = {step: next(r for r in visible(rows, {**setting, "step": step}) if r["mark"] == "bar")
            for step in (3, 4, 5)}
    assert bars[3]["y"] == [512, 512] and bars[4]["y"] == bars[5]["y"] == [64, 64]   # ldmatrix: 8x fewer
    assert bars[4]["series"].startswith(am.LDMATRIX.name) and bars[5]["series"].startswith(am.PIPELINED.name)
    reuse = next(r for r in visible(rows, {**setting, "step": 7}) if r["mark"] == "bar")
    assert reuse["series"].startswith(am.FRAGMENT_REUSE.name) and reuse["y"] == [16, 32, 32]   # Q, K, V: fewer
    points = [r for r in visible(rows, {**setting, "causal": False}) if r["mark"] == "point"]
    assert len(points) == 1 and points[0]["x"] == list(range(200))           # no causal mask: every row sees a key
    assert 0 < max(points[0]["y"]) < 0.02                                     # bf16 products, fp32 sums


# --- the page side: Sphinx adds Vega only where a figure is --------------------------------------

def test_vega_is_added_only_to_pages_with_a_figure(tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "_ext"))
    try:
        import offline_assets
    finally:
        sys.path.pop(0)

    class App:
        def __init__(self):
            self.added = []

        def add_js_file(self, filename, priority=500, **kwargs):
            self.added.append((filename, priority))

    with_figure, without = App(), App()
    offline_assets.add_figure_scripts(with_figure, "p", "page.html", {"body": interactive.to_html(
        small_figure().spec(), "t")}, None)
    offline_assets.add_figure_scripts(without, "p", "page.html", {"body": "<p>text</p>"}, None)
    assert without.added == []
    names = [name for name, _ in with_figure.added]
    assert names == [staged for staged, _ in offline_assets.VEGA_FILES] + [offline_assets.FIGURES_ENTRY]
    assert all(priority < 500 for _, priority in with_figure.added)   # before require.js (myst-nb's 500)
    if (REPO_ROOT / "node_modules" / "vega" / "build" / "vega.min.js").is_file():
        offline_assets._stage(REPO_ROOT / "node_modules", tmp_path)
        assert all((tmp_path / staged).is_file() for staged, _ in offline_assets.VEGA_FILES)
        assert "vegaEmbed" in (tmp_path / offline_assets.FIGURES_ENTRY).read_text()


# --- every widget has its counterpart, and every chapter says how to run it ----------------------

def widget_builders() -> set[str]:
    """Functions of onlinesoftmax/book/ that build an ipywidgets widget (they import ipywidgets)."""
    import ast

    names = set()
    for path in (REPO_ROOT / "onlinesoftmax" / "book").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(n, ast.Import) and any(a.name == "ipywidgets" for a in n.names) for n in ast.walk(node)):
                names.add(node.name)
    return names


def code_cells(path) -> list[str]:
    import re

    return re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", path.read_text(), flags=re.S)


def widget_cells(cells: list[str], builders: set[str]) -> list[int]:
    import re

    calls = re.compile(r"\bwidgets\.interact(ive)?\(|\b(" + "|".join(sorted(builders)) + r")\(")
    return [i for i, cell in enumerate(cells) if calls.search(re.sub(r"def \w+\(", "", cell))]


def test_every_widget_cell_is_followed_by_its_interactive_counterpart():
    builders = widget_builders()
    assert {"row_steps_box", "scan_stepper", "explorer"} <= builders
    found = 0
    for path in sorted((REPO_ROOT / "chapters").glob("[0-9]*.md")):
        cells = code_cells(path)
        for i in widget_cells(cells, builders):
            found += 1
            following = cells[i + 1] if i + 1 < len(cells) else ""
            assert "_figure(" in following and ".show()" in following, (
                f"{path.name}: the widget cell {i} ({cells[i].strip().splitlines()[-1][:60]!r}) has no interactive "
                "counterpart in the next cell (a counterparts.*_figure(...).show(), see interactive.py)")
    assert found >= 8


def test_the_widget_cell_finder_can_fail():
    cells = ["x = 1\n", "widgets.interact(f, n=widgets.IntSlider())\n", "print(2)\n", "row_steps_box('1')\n"]
    assert widget_cells(cells, {"row_steps_box"}) == [1, 3]
    assert widget_cells(["def row_steps_box(x):\n    pass\n"], {"row_steps_box"}) == []


def test_every_chapter_says_at_its_top_how_to_run_it():
    note = (REPO_ROOT / "chapters" / "_gpu_note.md").read_text()
    assert "make lab" in note and "jupytext" in note
    assert "\nlab:" in (REPO_ROOT / "Makefile").read_text()
    for path in sorted((REPO_ROOT / "chapters").glob("[0-9]*.md")):
        text = path.read_text()
        first_cell = text.find("```{code-cell}")
        assert 0 <= text.find("{include} _gpu_note.md") < first_cell, f"{path.name}: no how-to-run note at its top"
        assert "execution_mode()" in code_cells(path)[0] + code_cells(path)[1], (
            f"{path.name}: its first cells do not print book.execution_mode() (where the page ran, and the "
            "loud message when a GPU is there but CuPy cannot use it)")


def test_chapter_12_memory_counterpart():
    """The chunked path holds one chunk's logits and the float32 sum of dW; torch's path the logits and
    their gradient. A count that forgot the float32 sum (or counted the logits once) is shown wrong."""
    from onlinesoftmax.book.readings import training_figures as tf

    fig = tf.linear_loss_memory_figure()
    assert check(fig.spec()) == []
    assert tf.held_bytes(8192, 128256, None) == 3 * 8192 * 128256 * 2
    assert tf.held_bytes(8192, 128256, 128) == 128 * 128256 * 2 + 128256 * tf.HIDDEN * 4
    shown = visible(table(fig.spec()), {"vocabulary": 262144, "tokens": 8192})
    ours = next(r for r in shown if r["series"].startswith("linear_cross_entropy"))["y"]
    assert ours == sorted(ours) and min(ours) > 262144 * tf.HIDDEN * 4 / tf.GIB   # never under the dW floor
    assert not tf.held_bytes(8192, 128256, 128) == 128 * 128256 * 2             # the floor is counted
    # weight_grad="recompute": under 2 % of the logits at the default chunk (tokens / 64) and block
    logits = 8192 * 128256 * 2
    assert tf.held_bytes(8192, 128256, 128, "recompute") <= 0.02 * logits
    assert tf.held_bytes(8192, 128256, 128, "recompute") >= 128 * 128256 * 2   # the chunk's logits are counted
    dashed = next(r for r in shown if "recompute" in r["series"])["y"]
    assert max(dashed) < min(ours)
