"""Figures that stay interactive on a static page: controls over a precomputed table (Vega-Lite).

A widget recomputes only while a notebook kernel runs; the rendered book has none. So each
widget-driven figure also gets a counterpart built here: every setting its controls can take is
computed when the page is built (NumPy models, recorded GPU data), stored in the page as one
table, and drawn in the browser by Vega-Lite, served from the book's own `_static/`
(_ext/offline_assets.py adds it to the pages that hold a figure).

    fig = Figure("split", "A row split into chunks", [slider("chunks", "chunks", 1, 32, value=4)])
    panel = fig.panel("maxima", x="chunk", y="chunk maximum m", x_scale="ordinal")
    for chunks in range(1, 33):
        fig.series(panel, "chunk maximum (NumPy model)", range(chunks), maxima[chunks], mark="bar",
                   color=color("softmax_06_split_merge"), when={"chunks": chunks})
    fig.show()   # in a cell: the page shows the figure (SpecError first if it breaks the rule)

A series is one row of the table: its label, colour, mark, x and y values, where its numbers come
from (`source`) and the control setting it belongs to (`when`; a control it does not name does not
hide it). A series named after a kernel takes the kernel's colour from the palette (figures.py);
the legend is built in the browser from the series shown. interactive_rules.check says what in
a spec breaks the book's rule; showing a figure that breaks it raises SpecError.
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field

from onlinesoftmax.book.readings import figures
from onlinesoftmax.book.widgets.interactive_rules import (MARKS, NOTE_PANEL, SCHEMA_URL, SERIES_FIELDS, check, first_word,
                                                  param_name)

FALLBACK = ("Interactive figure: the built book draws it here from results computed when the page "
            "was built. In a running notebook, use the widget above: it recomputes.")
HOW_TO = "On this page: move the controls above; every setting was computed when the page was built."
LINE_PX = 15     # height of a line of note text


class SpecError(ValueError):
    """A figure's spec breaks the book's rule (the message lists what)."""


def _plain(value):
    """A value as JSON holds it (NumPy scalars become Python numbers and booleans)."""
    return value.item() if hasattr(value, "item") else value


def _number(value, digits: int = 6):
    """A JSON number, `digits` significant digits (None for NaN and infinities: Vega cannot place them)."""
    if value is None or isinstance(value, str):
        return value
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else float(f"{value:.{digits}g}")


@dataclass
class Control:
    name: str
    label: str
    options: list
    value: object
    kind: str = "select"                      # select, range, checkbox
    labels: list | None = None                # what a dropdown shows for each option

    def param(self) -> dict:
        bind: dict = {"name": self.label + " "}
        if self.kind == "range":
            step = self.options[1] - self.options[0] if len(self.options) > 1 else 1
            bind.update(input="range", min=self.options[0], max=self.options[-1], step=step)
        elif self.kind == "checkbox":
            bind.update(input="checkbox")
        else:
            bind.update(input="select", options=list(self.options))
            if self.labels:
                bind["labels"] = [str(label) for label in self.labels]
        return {"name": param_name(self.name), "value": self.value, "bind": bind}


def select(name: str, label: str, options, value=None, labels=None) -> Control:
    """A dropdown over `options` (numbers, strings or booleans), showing `labels` in their place."""
    options = [_plain(o) for o in options]
    return Control(name, label, options, options[0] if value is None else _plain(value), "select",
                   list(labels) if labels is not None else None)


def slider(name: str, label: str, lo: int, hi: int, step: int = 1, value=None) -> Control:
    """A slider over lo, lo + step, ..., hi (integers)."""
    options = list(range(lo, hi + 1, step))
    return Control(name, label, options, options[0] if value is None else value, "range")


def checkbox(name: str, label: str, value: bool = False) -> Control:
    return Control(name, label, [False, True], bool(value), "checkbox")


@dataclass
class Panel:
    name: str
    x: str
    y: str
    x_scale: str = "linear"                   # linear, log, log2, ordinal
    y_scale: str = "linear"                   # linear, log
    title: str = ""
    width: int = 420
    height: int = 240
    x_domain: list | None = None
    y_domain: list | None = None
    y_domain_by: tuple | None = None          # (control name, {option: [lo, hi]}): y range per setting
    y_zero: bool = False                      # a linear y axis starts at 0
    y_format: str | None = None               # d3 format of the y tick labels, e.g. ".1e"


@dataclass
class Figure:
    name: str
    title: str
    controls: list[Control] = field(default_factory=list)
    caption: str = ""
    digits: int = 6                           # significant digits kept in the table
    panels: list[Panel] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)

    def panel(self, name: str, x: str, y: str, **options) -> Panel:
        panel = Panel(name, x, y, **options)
        self.panels.append(panel)
        return panel

    def series(self, panel: Panel, label: str, xs=(), ys=(), *, mark: str = "line", color: str | None = None,
               source: str = "model", when: dict | None = None, dash: bool = False, x2s=()) -> None:
        """One series of `panel`, shown when the controls are at `when`. Its colour is the palette's
        when the label starts with a kernel's name, else `color`. A series with no finite y is left out."""
        if mark not in MARKS:
            raise ValueError(f"mark {mark!r} is not one of {MARKS}")
        ys = [_number(y, self.digits) for y in ys]
        if mark in ("line", "point", "bar", "bar_narrow") and all(y is None for y in ys):
            return
        self.rows.append({"panel": panel.name, "series": label, "color": color or figures.color(first_word(label)),
                          "mark": mark, "source": source, "dash": [5, 3] if dash else [1, 0],
                          "x": [_number(x, self.digits) for x in xs], "y": ys,
                          "x2": [_number(x, self.digits) for x in x2s],
                          "when": {k: _plain(v) for k, v in (when or {}).items()}})

    def note(self, text: str, when: dict | None = None, slot: int = 0) -> None:
        """Status text under the figure for the controls at `when` (lines split at newlines); notes of
        different slots stand one under the other."""
        self.rows.append({"panel": NOTE_PANEL, "series": "", "color": "#000000", "mark": "text",
                          "source": "setting", "dash": [1, 0], "x": [None], "y": [None], "x2": [],
                          "text": text.split("\n"), "slot": slot,
                          "when": {k: _plain(v) for k, v in (when or {}).items()}})

    def spec(self) -> dict:
        return build_spec(self)

    def html(self) -> str:
        spec = self.spec()
        problems = check(spec)
        if problems:
            raise SpecError(f"figure {self.name!r}:\n  " + "\n  ".join(problems))
        return to_html(spec, self.name)

    def show(self) -> None:
        """Display the figure in the cell's output; SpecError (the cell fails) if it breaks the rule."""
        from IPython.display import HTML, display

        display(HTML(self.html()))


# --- the Vega-Lite spec --------------------------------------------------------------------------

def _scale(kind: str, domain, zero: bool = False) -> dict:
    scale = {"log": {"type": "log"}, "log2": {"type": "log", "base": 2}, "linear": {"zero": zero}}.get(kind, {})
    return {**scale, "domain": domain} if domain is not None else scale


def _y_domain(panel: Panel):
    """The panel's fixed y range, or an expression choosing it by one control's value."""
    if panel.y_domain_by is None:
        return None if panel.y_domain is None else list(panel.y_domain)
    control, ranges = panel.y_domain_by
    lookup = json.dumps({str(_plain(k)): [float(v) for v in r] for k, r in ranges.items()}, separators=(",", ":"))
    return {"expr": f"{lookup}[''+{param_name(control)}]"}


def _layer(panel: Panel, mark: str) -> dict:
    """The layer that draws the panel's series of one kind of mark, each in its own colour."""
    x_type = "ordinal" if panel.x_scale == "ordinal" else "quantitative"
    x = {"field": "x", "type": x_type, "title": panel.x}
    x.update({"axis": {"labelAngle": 0, "labelOverlap": True}, "sort": None} if x_type == "ordinal"
             else {"scale": _scale(panel.x_scale, panel.x_domain)})
    y = {"field": "y", "type": "quantitative", "title": panel.y,
         "scale": _scale(panel.y_scale, _y_domain(panel), panel.y_zero)}
    if panel.y_format:
        y["axis"] = {"format": panel.y_format}
    tooltip = [{"field": "series", "type": "nominal"}, {"field": "x", "type": x_type, "title": panel.x},
               {"field": "y", "type": "quantitative", "title": panel.y, "format": ".4~g"}]
    dash = {"field": "dash", "type": "nominal", "scale": None}
    encoding: dict = {"color": {"field": "color", "type": "nominal", "scale": None}}
    if mark == "line":
        vl_mark = {"type": "line", "point": {"filled": True, "size": 30}, "clip": True}
        encoding.update(x=x, y=y, strokeDash=dash, tooltip=tooltip)
    elif mark == "point":
        vl_mark = {"type": "point", "filled": True, "size": 40, "clip": True}
        encoding.update(x=x, y=y, tooltip=tooltip)
    elif mark in ("bar", "bar_narrow"):
        vl_mark = {"type": "bar", "clip": True}
        if x_type == "ordinal":
            vl_mark["width"] = {"band": 0.8 if mark == "bar" else 0.45}
        encoding.update(x=x, y={**y, "stack": None}, tooltip=tooltip)
    elif mark == "rule_y":
        vl_mark = {"type": "rule", "strokeWidth": 1.5}
        encoding.update(y=y, strokeDash=dash, tooltip=tooltip[::2])
    elif mark == "rule_x":
        vl_mark = {"type": "rule", "strokeWidth": 1.5, "opacity": 0.6}
        encoding.update(x=x, tooltip=tooltip[:2])
    else:   # band_x
        vl_mark = {"type": "rect", "opacity": 0.25}
        encoding.update(x=x, x2={"field": "x2"}, tooltip=tooltip[:1])
    return {"transform": [{"filter": {"field": "mark", "equal": mark}}], "mark": vl_mark, "encoding": encoding}


# The legend of a panel: an invisible mark over every series the panel shows at the current
# setting; its colour scale takes the domain from those series and the range from their colours.
# The drawing layers use the colours directly (one scale over several filtered layers would take
# its range from one of them only).
LEGEND_LAYER = {
    "mark": {"type": "point", "filled": True, "opacity": 0},
    "encoding": {"color": {"field": "series", "type": "nominal", "scale": {"range": {"field": "color"}},
                           "legend": {"title": None, "orient": "bottom", "direction": "vertical",
                                      "labelLimit": 560, "symbolOpacity": 1}}},
}


def _compact(fig: Figure) -> tuple[list[dict], list[dict], list[dict], bool]:
    """(value rows, series table, note rows, whether there are bands). A value row names its series
    by number and holds its x/y values and control values (fields c0, c1, ...); a note row its text,
    its offset from the top (ly, px) and its control values."""
    fields = {c.name: f"c{i}" for i, c in enumerate(fig.controls)}
    unknown = {name for r in fig.rows for name in r["when"]} - set(fields)
    if unknown:
        raise ValueError(f"figure {fig.name!r}: series belong to controls it does not have: {sorted(unknown)}")
    bands = any(r["mark"] == "band_x" for r in fig.rows)
    notes = [r for r in fig.rows if r["mark"] == "text"]
    height = {slot: max(len(r["text"]) for r in notes if r["slot"] == slot) for slot in {r["slot"] for r in notes}}
    series: dict = {}
    values, note_rows = [], []
    for r in fig.rows:
        controls = {fields[name]: v for name, v in r["when"].items()}
        if r["mark"] == "text":   # each slot under the ones before it
            note_rows.append({"text": r["text"], "ly": LINE_PX * sum(n for slot, n in height.items()
                                                                     if slot < r["slot"]), **controls})
            continue
        value = {"s": series.setdefault(json.dumps([r[k] for k in SERIES_FIELDS]), len(series)),
                 "x": r["x"], "y": r["y"], **controls}
        if bands:
            value["x2"] = r["x2"]
        values.append(value)
    table = [{"s": i, **dict(zip(SERIES_FIELDS, json.loads(key)))} for key, i in series.items()]
    return values, table, note_rows, bands


def build_spec(fig: Figure) -> dict:
    """The Vega-Lite spec of `fig`: one table, a filter per control, a layer per kind of mark, and
    the notes as a text view with the same filters."""
    values, series_table, notes, bands = _compact(fig)
    controls = [{"name": c.name, "param": param_name(c.name), "field": f"c{i}", "options": c.options,
                 "value": c.value, "kind": c.kind} for i, c in enumerate(fig.controls)]
    filters = [{"filter": f"datum.{c['field']} == null || datum.{c['field']} == {c['param']}"} for c in controls]
    views = []
    for panel in fig.panels:
        marks = [m for m in MARKS if any(r["panel"] == panel.name and r["mark"] == m for r in fig.rows)]
        views.append({"title": panel.title, "width": panel.width, "height": panel.height,
                      "transform": [{"filter": {"field": "panel", "equal": panel.name}}],
                      "layer": [_layer(panel, m) for m in marks] + [LEGEND_LAYER]})
    body: list = [{"hconcat": views, "resolve": {"scale": {"color": "independent"}}}] if len(views) > 1 else views
    lines = max((n["ly"] // LINE_PX + len(n["text"]) for n in notes), default=0)
    if lines:
        body.append({"data": {"values": notes}, "transform": filters, "width": sum(p.width for p in fig.panels),
                     "height": LINE_PX * lines, "view": {"stroke": None},
                     "mark": {"type": "text", "align": "left", "baseline": "top", "fontSize": 12},
                     "encoding": {"text": {"field": "text"}, "x": {"value": 0},
                                  "y": {"field": "ly", "type": "quantitative", "scale": None}}})
    return {
        "$schema": SCHEMA_URL,
        "background": "#ffffff",                           # readable in the theme's dark mode too
        "title": {"text": fig.title, "subtitle": [HOW_TO] + (fig.caption.split("\n") if fig.caption else []),
                  "anchor": "start"},
        "params": [c.param() for c in fig.controls],
        "data": {"values": values},
        "transform": filters + [{"lookup": "s", "from": {"data": {"values": series_table}, "key": "s",
                                                          "fields": list(SERIES_FIELDS)}},
                                {"flatten": ["x", "y", "x2"] if bands else ["x", "y"]}],
        "vconcat": body,
        "resolve": {"scale": {"color": "independent"}},   # each panel's legend under it
        "config": {"view": {"stroke": "#dddddd"}, "legend": {"labelFontSize": 12}, "axis": {"labelFontSize": 11},
                   "title": {"subtitleFontSize": 11, "subtitleColor": "#444444"}},
        "usermeta": {"osm_controls": controls, "osm_panels": [p.name for p in fig.panels]},
    }


def to_html(spec: dict, name: str) -> str:
    """A placeholder that the page's script (_static/osm-figures.js) replaces with the drawn figure."""
    text = json.dumps(spec, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    ident = "osm-figure-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)
    return (f'<div class="osm-figure" id="{ident}" data-osm-figure="{html.escape(name)}">'
            f'<p class="osm-figure-fallback"><em>{html.escape(FALLBACK)}</em></p></div>\n'
            f'<script type="application/json" class="osm-figure-spec" data-target="{ident}">{text}</script>')
