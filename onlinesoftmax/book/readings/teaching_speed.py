"""How fast the online kernel runs against the safe one: the ratio chapters 02 and 03 both quote.

Both chapters read it here, from one recorded suite (`softmax-teaching`,
`python -m onlinesoftmax.bench softmax-teaching`), so they cannot quote two different runs of the same
two kernels. The ratio is the safe kernel's time over the online kernel's at the same shape (above
one: the online kernel is faster); at one shape both move the same counted bytes, so it is also the
ratio of their GB/s.
"""

from __future__ import annotations

import numpy as np

from onlinesoftmax.measure import results

SUITE = "softmax-teaching"
RECORD_COMMAND = "python -m onlinesoftmax.bench softmax-teaching"
ONLINE, SAFE = "softmax_02_online", "softmax_01_safe"


def load(gpu: str = "h200") -> dict:
    """The newest recorded run of the suite (FileNotFoundError names the command that records it)."""
    try:
        return results.load_recorded(SUITE, gpu)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{error}; `{RECORD_COMMAND}` on a GPU machine records it") from None


def _rows_of(rows, kernel, n_rows):
    found = {}
    for r in rows:
        if r.get("kernel") == kernel and r.get("n_rows") == n_rows:
            if r["n_cols"] in found:
                raise ValueError(f"two rows of {kernel} at {n_rows} x {r['n_cols']}")
            found[r["n_cols"]] = r
    return found


def series(rows, kernel: str, n_rows: int, field: str = "GBps") -> np.ndarray:
    """(n_cols, value) of one kernel at one batch, sorted by n_cols. field "elements_per_s" is
    computed from the row's time (n_rows * n_cols elements per call)."""
    points = []
    for n_cols, r in sorted(_rows_of(rows, kernel, n_rows).items()):
        value = n_rows * n_cols / (r["ms"] * 1e-3) if field == "elements_per_s" else r[field]
        points.append((n_cols, value))
    return np.array(points, dtype=float).reshape(-1, 2)


def online_over_safe(rows, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(n_cols, safe time / online time) at every length of `n_rows` where both kernels were timed."""
    online, safe = _rows_of(rows, ONLINE, n_rows), _rows_of(rows, SAFE, n_rows)
    common = sorted(set(online) & set(safe))
    ratio = [safe[n]["ms"] / online[n]["ms"] for n in common]
    if not all(np.isfinite(ratio)) or not all(x > 0 for x in ratio):
        raise ValueError(f"a recorded time at batch {n_rows} is not a positive number: {ratio}")
    return np.array(common, dtype=float), np.array(ratio, dtype=float)


def ratio(rows, n_rows: int, n_cols: int) -> float:
    """safe time / online time at one recorded shape (KeyError when either kernel lacks it)."""
    common, values = online_over_safe(rows, n_rows)
    hits = values[common == n_cols]
    if len(hits) != 1:
        raise KeyError(f"no recorded pair of {ONLINE} and {SAFE} at {n_rows} x {n_cols}")
    return float(hits[0])
