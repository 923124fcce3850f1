"""The rule an interactive figure's spec keeps (figures built by interactive.py).

`check(spec)` lists what is wrong with a Vega-Lite spec by the book's rule, read from the spec
itself (so that a spec edited by hand, or broken on purpose in a test, is judged the same way):

- it is valid Vega-Lite, by the JSON schema of the vega-lite in node_modules/ (when installed);
- every control is a bound parameter starting at one of its options, and filters the table;
- each panel draws every series in the colour its table row gives, and has one legend whose
  entries come from the series shown for the current setting (no fixed domain or values);
- a series named after a kernel is in that kernel's colour (figures.PALETTE), one label keeps
  one colour, and recorded GPU data, and only it, says "recorded" in its label;
- at the controls' starting values every panel draws something, and moving any one control
  changes what is drawn.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache

from onlinesoftmax.book.readings import figures

SCHEMA_URL = "https://vega.github.io/schema/vega-lite/v6.json"
MARKS = ("line", "point", "bar", "bar_narrow", "rule_x", "rule_y", "band_x")
SOURCES = ("model", "recorded", "definition", "reference", "setting")
SERIES_FIELDS = ("panel", "series", "color", "mark", "source", "dash")
NOTE_PANEL = "_note"
HEX = re.compile(r"^#[0-9a-fA-F]{6}$")


def param_name(control: str) -> str:
    """The Vega parameter a control sets."""
    return "ctl_" + re.sub(r"\W", "_", control)


def first_word(label: str) -> str:
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", label)
    return words[0] if words else label


def _note_views(spec: dict) -> list[dict]:
    """The text views that hold the figure's notes (their own data, under vconcat)."""
    return [v for v in spec.get("vconcat", []) if isinstance(v, dict) and "data" in v
            and (v.get("mark") or {}).get("type") == "text"]


def table(spec: dict) -> list[dict]:
    """The figure's rows as the browser sees them before flattening: each value row joined with its
    series (the lookup transform), each note row as a series of the panel NOTE_PANEL, and the
    control values of both as {"when": {control name: value}}."""
    controls = (spec.get("usermeta") or {}).get("osm_controls") or []
    fields = {c["field"]: c["name"] for c in controls}
    series = {}
    for t in spec.get("transform", []):
        if "lookup" in t:
            series = {d["s"]: d for d in t["from"]["data"]["values"]}
    rows = []
    for value in (spec.get("data") or {}).get("values") or []:
        row = {k: v for k, v in series.get(value.get("s"), {}).items() if k != "s"}
        row.update({k: v for k, v in value.items() if k not in fields and k != "s"})
        row["when"] = {fields[k]: v for k, v in value.items() if k in fields}
        rows.append(row)
    for view in _note_views(spec):
        for note in view["data"].get("values", []):
            rows.append({"panel": NOTE_PANEL, "series": "", "mark": "text", "source": "setting", "text": note.get("text"),
                         "when": {fields[k]: v for k, v in note.items() if k in fields}})
    return rows


def visible(rows: list[dict], setting: dict) -> list[dict]:
    """The rows shown when the controls are at `setting` ({control name: value})."""
    return [r for r in rows if all(setting.get(name) == value for name, value in r["when"].items())]


@lru_cache(maxsize=1)
def _schema_validator():
    """A validator for the Vega-Lite schema of the installed vega-lite (None without node_modules, as on
    a GPU machine running the chapters as scripts, where jsonschema need not be installed either)."""
    from onlinesoftmax.runtime.loader import REPO_ROOT

    package = REPO_ROOT / "node_modules" / "vega-lite"
    if not (package / "build" / "vega-lite-schema.json").is_file():
        return None
    import jsonschema
    major = json.loads((package / "package.json").read_text())["version"].split(".")[0]
    if f"/v{major}.json" not in SCHEMA_URL:
        raise RuntimeError(f"node_modules holds vega-lite {major}.x but the specs name {SCHEMA_URL}")
    schema = json.loads((package / "build" / "vega-lite-schema.json").read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def schema_problems(spec: dict) -> list[str]:
    """What the Vega-Lite JSON schema rejects in `spec` (nothing checked where it is not installed)."""
    validator = _schema_validator()
    if validator is None:
        return []
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(spec))
    if error is None:
        return []
    where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
    return [f"not a valid Vega-Lite spec at {where}: {error.message[:300]}"]


def _views(node, path=""):
    """(path, view) for every view of the spec that has layers."""
    if isinstance(node, dict):
        if "layer" in node:
            yield path, node
        for key in ("vconcat", "hconcat", "concat"):
            for i, child in enumerate(node.get(key, [])):
                yield from _views(child, f"{path}/{key}/{i}")


def _legend_problems(path: str, layers: list) -> list[str]:
    """A panel draws each series in its table colour and has one legend over all its series."""
    problems, legends = [], 0
    for i, layer in enumerate(layers):
        colour = (layer.get("encoding") or {}).get("color") or {}
        scale = colour.get("scale") or {}
        if colour.get("field") == "series":
            legends += 1
            legend = colour.get("legend")
            if scale.get("range") != {"field": "color"} or "domain" in scale:
                problems.append(f"{path}/layer/{i}: the legend's colours must come from the table "
                                "(range field 'color') and its entries from the series shown (no fixed domain)")
            if not isinstance(legend, dict) or "values" in legend:
                problems.append(f"{path}/layer/{i}: the legend is hidden or lists fixed values")
            if layer.get("transform") or {"x", "y"} & set(layer.get("encoding", {})):
                problems.append(f"{path}/layer/{i}: the legend layer must see every series of its panel")
        elif colour != {"field": "color", "type": "nominal", "scale": None}:
            problems.append(f"{path}/layer/{i}: a series must be drawn in its own colour (field 'color', no scale)")
    if legends != 1:
        problems.append(f"{path}: a panel needs exactly one legend layer, it has {legends}")
    return problems


def _control_problems(spec: dict, controls: list[dict]) -> list[str]:
    problems = []
    params = {p.get("name"): p for p in spec.get("params", [])}
    filters = " ".join(t["filter"] for t in spec.get("transform", []) if isinstance(t.get("filter"), str))
    for c in controls:
        p = params.get(c["param"])
        if p is None or "bind" not in p:
            problems.append(f"control {c['name']!r} has no bound parameter {c['param']!r}")
            continue
        if c["value"] not in c["options"] or p.get("value") != c["value"]:
            problems.append(f"control {c['name']!r} starts at {p.get('value')!r}, not one of its options")
        if p["bind"].get("input") == "select" and p["bind"].get("options") != c["options"]:
            problems.append(f"control {c['name']!r}: the dropdown's options are not the table's")
        if not re.search(rf"datum\.{c['field']}\b.*\b{c['param']}\b", filters):
            problems.append(f"control {c['name']!r} filters nothing (no filter compares datum.{c['field']} "
                            f"with {c['param']})")
    for name in sorted(set(re.findall(r"\bctl_\w+", filters)) - {c["param"] for c in controls}):
        problems.append(f"a filter names {name!r}, which no control defines")
    for view in _note_views(spec):
        if view.get("transform") != [t for t in spec.get("transform", []) if isinstance(t.get("filter"), str)]:
            problems.append("the notes are not filtered by the controls as the series are")
    return problems


def _row_problems(rows: list[dict], controls: list[dict], panels: list[str]) -> list[str]:
    problems, colours = [], {}
    options = {c["name"]: c["options"] for c in controls}
    for i, r in enumerate(rows):
        label, colour, source, mark = r.get("series", ""), str(r.get("color", "")), r.get("source"), r.get("mark")
        where = f"row {i} ({label!r})"
        if r.get("panel") not in panels + [NOTE_PANEL]:
            problems.append(f"{where}: panel {r.get('panel')!r} is not drawn")
        if source not in SOURCES or mark not in MARKS + ("text",):
            problems.append(f"{where}: source {source!r} or mark {mark!r} unknown (sources {SOURCES}, marks {MARKS})")
        for name, value in r["when"].items():
            if name not in options or value not in options[name]:
                problems.append(f"{where}: {name} = {value!r} is not an option of a control of the figure")
        if mark == "text":
            continue
        if not label or not HEX.match(colour):
            problems.append(f"{where}: a series needs a label and a #rrggbb colour (got {colour!r})")
            continue
        key = figures.canonical(first_word(label))
        if key is not None and colour.lower() != figures.PALETTE[key].lower():
            problems.append(f"{where}: drawn in {colour}, the book's colour for {key} is {figures.PALETTE[key]}")
        if colours.setdefault(label, colour.lower()) != colour.lower():
            problems.append(f"{where}: the same series in two colours ({colours[label]} and {colour})")
        if (source == "recorded") != ("recorded" in label.lower()):
            problems.append(f"{where}: recorded GPU data must say 'recorded' in its label, and only it "
                            f"(source {source!r})")
        xs, ys = r.get("x", []), r.get("y", [])
        if mark in ("line", "point", "bar", "bar_narrow") and (len(xs) != len(ys) or not xs):
            problems.append(f"{where}: {len(xs)} x values against {len(ys)} y values")
        if mark == "band_x" and len(r.get("x2", [])) != len(xs):
            problems.append(f"{where}: a band needs as many ends (x2) as starts (x)")
    return problems


def _shown(rows: list[dict]) -> set:
    return {json.dumps({k: v for k, v in r.items() if k != "when"}, sort_keys=True) for r in rows}


def check(spec: dict) -> list[str]:
    """What is wrong with a figure's spec by the book's rule (an empty list: nothing)."""
    problems = schema_problems(spec)
    meta = spec.get("usermeta") or {}
    controls, panels = meta.get("osm_controls"), meta.get("osm_panels")
    if controls is None or panels is None or not isinstance((spec.get("data") or {}).get("values"), list):
        return problems + ["the spec carries no table (data.values) or no usermeta.osm_controls/osm_panels"]
    problems += _control_problems(spec, controls)
    for path, view in _views(spec):
        problems += _legend_problems(path, view["layer"])
    title = spec.get("title") or {}
    if " ".join([title.get("text", "")] + list(title.get("subtitle", []))).lower().count("recorded") > 1:
        problems.append("the title says 'recorded' more than once (say it once, in the series or the caption)")
    rows = table(spec)
    problems += _row_problems(rows, controls, panels)
    if problems:
        return problems
    default = {c["name"]: c["value"] for c in controls}
    shown = visible(rows, default)
    for panel in panels:
        if not any(r["panel"] == panel for r in shown):
            problems.append(f"panel {panel!r} draws nothing at the controls' starting values {default}")
    for c in controls:
        others = [o for o in c["options"] if o != c["value"]]
        if others and all(_shown(visible(rows, {**default, c["name"]: o})) == _shown(shown) for o in others):
            problems.append(f"moving control {c['name']!r} changes nothing in the figure")
    return problems
