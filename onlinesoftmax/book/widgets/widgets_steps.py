"""The online recurrence step by step: chapter 02's table and "row x" box, chapter 03's stepper.

Row steps: `step_table` runs the online recurrence on a row and puts every step beside the
state the definition gives for the same prefix, flagging a step where they differ; `show_steps`
is the update function of chapter 02's "row x" box. `scan_stepper` lets a reader pick an
element n of a vector and see m, l and the rescale factor change at that step.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import reference

# --- the recurrence beside its definition (chapter 02) ----------------------------------------

ROW_STEPS_MAX = 16   # elements the "row x" box steps through


def state_by_definition(prefix) -> tuple[float, float]:
    """(m, l) of a prefix from the definition, m = max, l = sum e^(x - m), in float64.

    A prefix with no element above -inf (or no element at all) is the empty state (-inf, 0):
    its sum has no finite term. reference.row_stats leaves l = NaN there (e^(-inf - (-inf))),
    which is the unguarded arithmetic, not the state the recurrence keeps."""
    prefix = np.asarray(prefix, dtype=np.float64).ravel()
    if prefix.size == 0 or bool(np.all(prefix == -np.inf)):
        return -np.inf, 0.0
    m, l = reference.row_stats(prefix)
    return float(m[0]), float(l[0])


def same_state(a: tuple[float, float], b: tuple[float, float], rtol: float = 1e-12) -> bool:
    """Whether two (m, l) states agree: m exactly (NaN matches NaN), l to `rtol`."""
    (m_a, l_a), (m_b, l_b) = a, b
    same_m = m_a == m_b or (np.isnan(m_a) and np.isnan(m_b))
    same_l = (np.isnan(l_a) and np.isnan(l_b)) or bool(np.isclose(l_a, l_b, rtol=rtol, atol=0.0))
    return bool(same_m and same_l)


def compare_steps(x, steps: list[dict] | None = None) -> list[dict]:
    """Each step of the recurrence (reference.online_steps(x), or the `steps` given) with the
    definition's state of the same prefix ("m_def", "l_def") and whether the two agree."""
    x = np.asarray(x, dtype=np.float64).ravel()
    steps = reference.online_steps(x) if steps is None else steps
    compared = []
    for step in steps:
        m_def, l_def = state_by_definition(x[:step["n"]])
        compared.append({**step, "m_def": m_def, "l_def": l_def,
                         "agrees": same_state((step["m"], step["l"]), (m_def, l_def))})
    return compared


def fmt(value, digits: int | None = None) -> str:
    """A table cell: – for nothing, ±∞, integers without decimals, else `digits` decimals."""
    if value is None:
        return "–"
    if np.isnan(value):
        return "NaN"
    if np.isinf(value):
        return "−∞" if value < 0 else "∞"
    if float(value).is_integer() or digits is None:
        return f"{value:g}"
    return f"{value:.{digits}f}"


def step_table(x, digits: int = 6, steps: list[dict] | None = None):
    """(compared steps, HTML table, steps n where recurrence and definition differ)."""
    from onlinesoftmax import book

    compared = compare_steps(x, steps)
    rows = [[c["n"], fmt(c["x"]), fmt(c["rescale"], digits), fmt(c["m"]), fmt(c["l"], digits),
             f"({fmt(c['m_def'])}, {fmt(c['l_def'], digits)})", "yes" if c["agrees"] else "NO"]
            for c in compared]
    header = ["n", "xₙ", "rescale factor", "mₙ", "ℓₙ", "(mₙ, ℓₙ) by definition", "agree"]
    return compared, book.html_table(header, rows), [c["n"] for c in compared if not c["agrees"]]


def parse_numbers(text: str) -> list[float]:
    """Comma- or semicolon-separated numbers; ValueError for anything else, NaN included."""
    values = [float(v) for v in text.replace(";", ",").split(",") if v.strip()]
    if any(np.isnan(v) for v in values):
        raise ValueError("NaN is not accepted")
    return values


def row_report(row: str, recurrence=reference.online_steps) -> dict:
    """What chapter 02's "row x" box shows for the typed `row`, without showing it:
    {"values", "steps", "table", "mismatches", "final", "message"}, or {"message"} alone when the
    text is not a row."""
    try:
        values = parse_numbers(row)
    except ValueError:
        return {"message": "Type numbers separated by commas, e.g. 1, 5, 3 (-inf and inf are allowed, NaN is not)."}
    if not values:
        return {"message": "Type at least one number."}
    shown = values[:ROW_STEPS_MAX]
    with np.errstate(invalid="ignore", over="ignore"):   # inf - inf in a row holding +inf
        steps, table, mismatches = step_table(shown, digits=4, steps=recurrence(shown))
    m, l = steps[-1]["m"], steps[-1]["l"]
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = -np.inf if l == 0 else m + np.log(l)
    lines = []
    if len(values) > len(shown):
        lines.append(f"(the first {len(shown)} of {len(values)} numbers)")
    lines.append(f"final state: m = {fmt(m)}, l = {fmt(l, 6)}; log-sum-exp = m + ln l = {fmt(lse, 6)}")
    if steps[-1]["n"] > 0 and m == -np.inf:
        lines.append("every element is -inf: the state is still the empty one, and softmax of this row "
                     "is 0/0 (NaN)")
    for n in mismatches:
        c = steps[n]
        lines.append(f"MISMATCH at n = {n}: the recurrence gives (m, l) = ({fmt(c['m'])}, {fmt(c['l'], 6)}), "
                     f"the definition ({fmt(c['m_def'])}, {fmt(c['l_def'], 6)})")
    return {"values": shown, "steps": steps, "table": table, "mismatches": mismatches, "final": (m, l),
            "message": "\n".join(lines)}


def show_steps(row: str = "2, -1, 7, 7, 0.5, 9", recurrence=reference.online_steps) -> dict | None:
    """The update of chapter 02's "row x" box: run `recurrence` on the typed row, show its steps
    beside the definition, and report the final state. Returns what it showed (None when the
    text is not a row): {"values", "steps", "mismatches", "final", "message"}."""
    from IPython.display import display

    report = row_report(row, recurrence)
    if "steps" not in report:
        print(report["message"])
        return None
    display(report.pop("table"))
    print(report["message"])
    return report


def row_steps_box(default: str = "2, -1, 7, 7, 0.5, 9"):
    """Chapter 02's "row x" box: a text field whose every change re-runs show_steps."""
    import ipywidgets as widgets

    text = widgets.Text(value=default, description="row x:", continuous_update=False,
                        layout=widgets.Layout(width="420px"))
    return widgets.interactive(show_steps, row=text, recurrence=widgets.fixed(reference.online_steps))


# --- recorded throughput ----------------------------------------------------------------------

# --- step the scan ----------------------------------------------------------------------------

def parse_row(text: str) -> list[float]:
    return [float(v) for v in text.replace(";", ",").split(",") if v.strip()]


def scan_stepper(default: str = "1, 5, 3"):
    """Pick an element n of your own vector; see m, l and the rescale factor change at that step."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display
    from matplotlib.ticker import MaxNLocator

    row = widgets.Text(value=default, description="vector x", continuous_update=False,
                       layout=widgets.Layout(width="420px"))
    values = parse_row(default)
    step = widgets.IntSlider(value=len(values), min=1, max=max(1, len(values)), description="element n",
                             continuous_update=False)
    status = widgets.HTML()
    out = widgets.Output()

    def draw(*_):
        try:
            x = parse_row(row.value)[:32]
        except ValueError:
            status.value = "Type numbers separated by commas, e.g. 1, 5, 3 (-inf allowed)."
            return
        if not x:
            status.value = "Type at least one number."
            return
        step.max = len(x)
        n = min(step.value, len(x))
        steps = reference.online_steps(x)
        before, now = steps[n - 1], steps[n]
        ns = np.arange(1, len(x) + 1)
        m = np.array([s["m"] for s in steps[1:]])
        l = np.array([s["l"] for s in steps[1:]])
        rescale = np.array([s["rescale"] for s in steps[1:]])
        with out:
            out.clear_output(wait=True)
            fig, (ax, ax_l) = plt.subplots(1, 2, figsize=(10, 3.2))
            ax.stem(ns, np.where(np.isfinite(x), x, np.nan), basefmt=" ", linefmt="C7-", markerfmt="C7o",
                    label="$x_n$")
            ax.step(ns, np.where(np.isfinite(m), m, np.nan), where="post", color="C0", label="$m_n$")
            ax.axvline(n, color="C3", linewidth=1)
            ax.set_xlabel("n")
            ax.legend(fontsize=8)
            ax.set_title("elements and the running maximum", fontsize=9)
            ax_l.plot(ns, l, "o-", color="C1", label=r"$\ell_n$")
            ax_l.plot(ns, rescale, "s:", color="C2", label=r"rescale $e^{m_{n-1}-m_n}$")
            ax_l.axvline(n, color="C3", linewidth=1)
            ax_l.set_xlabel("n")
            ax_l.legend(fontsize=8)
            for axis in (ax, ax_l):
                axis.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax_l.set_title("the running sum and the rescale factor", fontsize=9)
            fig.tight_layout()
            plt.show()

        def f(v):
            return "−∞" if v == -np.inf else f"{v:.6g}"

        status.value = (f"step {n}: x<sub>{n}</sub> = {f(now['x'])}; m: {f(before['m'])} → {f(now['m'])}; "
                        f"rescale e<sup>m<sub>{n - 1}</sub> − m<sub>{n}</sub></sup> = {f(now['rescale'])}; "
                        f"ℓ: {f(before['l'])} × {f(now['rescale'])} + e<sup>x<sub>{n}</sub> − m<sub>{n}</sub></sup>"
                        f" = {f(now['l'])}")

    row.observe(draw, "value")
    step.observe(draw, "value")
    draw()
    box = widgets.VBox([widgets.HBox([row, step]), status, out])
    display(box)
    return box
