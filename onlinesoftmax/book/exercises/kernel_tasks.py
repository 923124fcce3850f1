"""What each kind of CUDA exercise launches, on which inputs, and how its answer is judged.

A task knows its kernels' signature and launch geometry, its cases (a small readable one
first, then the edge matrix), the float64 reference and tolerance of each output, and (for the
ones that are timed) the shape and the ideal bytes. It runs the same on a GPU (cupy arrays) and
on the CPU emulator (numpy arrays) through an Arena, which puts every input in front of a band
of NaN and every output, poisoned, in front of a band of poison, so a read past the end of an
input shows up as NaN and a write past the end of an output as a changed guard band.

Kinds: SoftmaxRows (y = softmax of each row: chapters 03 and 06), SplitMerge (two blocks per
row, two launches: 04), LseRows (one log-sum-exp per row: 05), TopK (softmax + top-k, a warp per
row: 07) and Attention (fp32, d = 64: 08).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onlinesoftmax import checks, reference, simulate as sim
from onlinesoftmax.book.exercises.grading import Tolerance

GUARD = 1024                       # elements of NaN after an input, of poison after an output (a block's worth and more)
EDGE_SIZES = (1, 2, 3, 31, 33, 100, 257, 4097)
EDGE_ROWS = (3, 3, 3, 5, 5, 7, 3, 2)
COLUMN_POISON = -2                 # no column has this index


@dataclass
class Check:
    """One output of one case: yours and the float64 reference, the rule, and what to quote."""
    output: str
    yours: np.ndarray
    expected: np.ndarray
    tolerance: Tolerance
    rows: np.ndarray | None = None      # the input row behind each row of the output
    row_label: str = "input row"
    poison: float | None = None


class Arena:
    """Inputs and outputs with guard bands, in numpy (CPU emulator) or cupy (GPU)."""

    def __init__(self, xp):
        self.xp = xp
        self.outputs = []

    def input(self, host: np.ndarray, offset: int = 0):
        xp, host = self.xp, np.ascontiguousarray(host)
        buffer = xp.full(offset + host.size + GUARD, np.nan if host.dtype.kind == "f" else -1, dtype=host.dtype)
        buffer[offset:offset + host.size] = xp.asarray(host.ravel())
        return buffer[offset:offset + host.size].reshape(host.shape)

    def output(self, name: str, shape, dtype, poison):
        buffer = self.xp.full(int(np.prod(shape)) + GUARD, poison, dtype=dtype)
        self.outputs.append((name, buffer, int(np.prod(shape)), poison))
        return buffer[:int(np.prod(shape))].reshape(shape)

    def overwritten(self) -> list[str]:
        """The outputs whose guard band was written to (a write past their end)."""
        found = []
        for name, buffer, size, poison in self.outputs:
            band = buffer[size:]
            if bool((band != poison).any()):
                found.append(name)
        return found


def host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def softmax_tolerance(x: np.ndarray, expected: np.ndarray) -> Tolerance:
    """The tests' rule: twice the float32 safe softmax's error plus two ulps of the largest output."""
    base = checks.max_abs_error(reference.softmax_same_dtype(x), expected)
    return Tolerance(rtol=0.0, atol=checks.tolerance(base if np.isfinite(base) else 0.0, expected, np.float32))


def edge_rows() -> list[tuple[str, np.ndarray]]:
    """The rows every row-wise kernel exercise is checked on, readable case first."""
    cases = [("the row [1, 2, 3]", np.array([[1.0, 2.0, 3.0]], np.float32))]
    cases += [(f"{n_rows} rows of {n}", checks.random_rows(np, n_rows, n, seed=n))
              for n, n_rows in zip(EDGE_SIZES, EDGE_ROWS)]
    cases.append(("2 rows of 4096", checks.random_rows(np, 2, 4096, seed=4096)))
    special, _ = checks.special_rows(np, 300)
    cases.append(("rows with -inf, all -inf, +inf and NaN", special))
    rng = np.random.default_rng(7)
    cases.append(("logits near +1000 and near -1000",
                  np.concatenate([rng.standard_normal((2, 500)) + 1000, rng.standard_normal((2, 500)) - 1000])
                  .astype(np.float32)))
    return cases


VISIBLE_SIZES = frozenset(EDGE_SIZES) | {200, 300, 500, 1024, 4096}


def hidden_rows(seed: int, small: bool = False) -> list[tuple[str, np.ndarray]]:
    """Cases drawn afresh for each grading from `seed` (the grader picks it at random): row lengths
    the chapter never shows (a tail that is no multiple of 32 or of the block, one column), scores
    of order 1e4, rows far below -1e4 and -1e6 (a state started at a finite "minus infinity" fails
    them), -inf entries. `small` keeps the rows short (the CPU emulator)."""
    rng = np.random.default_rng(seed)
    top = 700 if small else 5000

    def length(low, high):
        while True:
            n = int(rng.integers(low, high))
            if n % 32 and n not in VISIBLE_SIZES:
                return n

    n_tail, n_wide = length(34, 255), length(258, top)
    scaled = (rng.standard_normal((3, n_tail)) * 1e4).astype(np.float32)
    far = np.concatenate([rng.standard_normal((2, n_tail)) * 10 - 1e7,
                          rng.standard_normal((1, n_tail)) * 1e3 - 1e5]).astype(np.float32)
    holes = checks.random_rows(np, 3, n_wide, seed=seed % 2**31)
    holes[0, rng.choice(n_wide, n_wide // 2, replace=False)] = -np.inf
    holes[1, :] = -np.inf
    holes[1, int(rng.integers(n_wide))] = float(rng.standard_normal() * 1e4)
    return [("hidden case: rows of one column", rng.standard_normal((3, 1)).astype(np.float32) * 100),
            (f"hidden case: 4 rows of {n_tail} (no multiple of 32)", checks.random_rows(np, 4, n_tail, seed=seed % 2**31 + 1)),
            (f"hidden case: 3 rows of {n_tail}, logits of order 1e4", scaled),
            (f"hidden case: rows of {n_tail} near -1e7 and near -1e5", far),
            (f"hidden case: 3 rows of {n_wide}, -inf entries, all -inf but one", holes)]


def strided(x: np.ndarray, extra: int) -> np.ndarray:
    """x inside rows `extra` columns longer, the extra columns NaN (a kernel that reads past its row sees NaN)."""
    wide = np.full((x.shape[0], x.shape[1] + extra), np.nan, np.float32)
    wide[:, :x.shape[1]] = x
    return wide


# ---- y = softmax of each row ------------------------------------------------------------------

class SoftmaxRows:
    """kernel(x, y, n_cols, x_row_stride, y_row_stride); grid n_rows, block 256."""
    block = 256
    timed_shape = (4000, 4096)
    ideal_bytes_per_element = 8        # read once, written once (fp32)

    def entries(self, name):
        return (name,)

    def cases(self, seed: int = 0, small: bool = False):
        """The chapter's cases (edge_rows), rows off a 16-byte boundary, then hidden_rows(seed)."""
        rows = [(name, {"x": x}) for name, x in edge_rows()]
        odd = checks.random_rows(np, 4, 1024, seed=11)
        rows.append(("4 rows of 1024, 1025 floats apart (most rows not on a 16-byte boundary)",
                     {"x": odd, "x_extra": 1}))
        rows += [(name, {"x": x}) for name, x in hidden_rows(seed, small)]
        return rows

    def racecheck_case(self):
        """A small case for compute-sanitizer: 3 rows of 257 (two strides of the block, the last partial)."""
        return next((label, c) for label, c in self.cases() if label == "3 rows of 257")

    def launch(self, backend, name, x, y, n_cols, x_stride, y_stride):
        backend.launch(name, (x.shape[0],), (self.block,),
                       (x, y, np.int32(n_cols), np.int64(x_stride), np.int64(y_stride)))

    def run(self, backend, name, case, arena):
        x_host = case["x"].copy()           # a private copy: the reference is computed from it
        extra = case.get("x_extra", 0)
        n_rows, n_cols = x_host.shape
        x = arena.input(strided(x_host, extra) if extra else x_host)
        y = arena.output("y", (n_rows, n_cols), np.float32, checks.POISON["float32"])
        self.launch(backend, name, x, y, n_cols, n_cols + extra, n_cols)
        backend.sync()
        return self.expect_y(x_host, y)

    def timed(self, backend, name, arena, seed: int = 0):
        """(launch, ideal bytes, checks): the timed launch on fresh inputs drawn from `seed` and a
        poisoned output, and what its output must be once the timer is done (every launch of the
        timer writes the same output, so the last one is checked)."""
        x_host = np.random.default_rng(seed).standard_normal(self.timed_shape, dtype=np.float32)
        x = arena.input(x_host)
        y = arena.output("y", self.timed_shape, np.float32, checks.POISON["float32"])
        n = self.timed_shape[1]
        return ((lambda: self.launch(backend, name, x, y, n, n, n)), self.ideal_bytes_per_element * x.size,
                lambda: self.expect_y(x_host, y))

    def expect_y(self, x_host, y):
        expected = reference.softmax(x_host)
        return [Check("y", host(y), expected, softmax_tolerance(x_host, expected), x_host, poison=checks.POISON["float32"])]


# ---- two blocks per row, two launches ---------------------------------------------------------

class SplitMerge(SoftmaxRows):
    """<name>_states(x, m_parts, l_parts, n_cols, x_row_stride), grid (2, n_rows), then
    <name>_output(x, m_parts, l_parts, y, n_cols, x_row_stride, y_row_stride), grid (2, n_rows)."""

    def entries(self, name):
        return (f"{name}_states", f"{name}_output")

    def launch(self, backend, name, x, y, n_cols, x_stride, y_stride, parts=None):
        n_rows = x.shape[0]
        m_parts, l_parts = parts if parts is not None else (backend.xp.empty(2 * n_rows, np.float32),
                                                            backend.xp.empty(2 * n_rows, np.float32))
        backend.launch(f"{name}_states", (2, n_rows), (self.block,),
                       (x, m_parts, l_parts, np.int32(n_cols), np.int64(x_stride)))
        backend.launch(f"{name}_output", (2, n_rows), (self.block,),
                       (x, m_parts, l_parts, y, np.int32(n_cols), np.int64(x_stride), np.int64(y_stride)))

    def timed(self, backend, name, arena, seed: int = 0):
        x_host = np.random.default_rng(seed).standard_normal(self.timed_shape, dtype=np.float32)
        x = arena.input(x_host)
        y = arena.output("y", self.timed_shape, np.float32, checks.POISON["float32"])
        parts = (backend.xp.empty(2 * x.shape[0], np.float32), backend.xp.empty(2 * x.shape[0], np.float32))
        n = self.timed_shape[1]
        return ((lambda: self.launch(backend, name, x, y, n, n, n, parts)), self.ideal_bytes_per_element * x.size,
                lambda: self.expect_y(x_host, y))


# ---- one log-sum-exp per row ------------------------------------------------------------------

class LseRows(SoftmaxRows):
    """kernel(x, lse, n_cols, x_row_stride); grid n_rows, block 256."""
    ideal_bytes_per_element = 4        # read once; one float per row written

    def launch(self, backend, name, x, lse, n_cols, x_stride):
        backend.launch(name, (x.shape[0],), (self.block,), (x, lse, np.int32(n_cols), np.int64(x_stride)))

    def run(self, backend, name, case, arena):
        x_host = case["x"].copy()           # a private copy: the reference is computed from it
        extra = case.get("x_extra", 0)
        n_rows, n_cols = x_host.shape
        x = arena.input(strided(x_host, extra) if extra else x_host)
        lse = arena.output("lse", (n_rows,), np.float32, checks.POISON["float32"])
        self.launch(backend, name, x, lse, n_cols, n_cols + extra)
        backend.sync()
        return self.expect_lse(x_host, lse)

    def expect_lse(self, x_host, lse):
        # the exercise's contract is the state's m + log l: a row holding +inf gives NaN (the library's
        # logsumexp reads such a row again and gives +inf, as torch)
        expected = reference.logsumexp(x_host)
        expected = np.where(expected == np.inf, np.nan, expected)
        base = checks.max_abs_error(reference.logsumexp_same_dtype(x_host), expected)
        rule = Tolerance(rtol=0.0, atol=checks.tolerance(base if np.isfinite(base) else 0.0, expected, np.float32))
        return [Check("lse", host(lse), expected, rule, x_host, poison=checks.POISON["float32"])]

    def timed(self, backend, name, arena, seed: int = 0):
        x_host = np.random.default_rng(seed).standard_normal(self.timed_shape, dtype=np.float32)
        x = arena.input(x_host)
        lse = arena.output("lse", (self.timed_shape[0],), np.float32, checks.POISON["float32"])
        n = self.timed_shape[1]
        return ((lambda: self.launch(backend, name, x, lse, n, n)), 4 * x.size + 4 * x.shape[0],
                lambda: self.expect_lse(x_host, lse))


class RowSum(LseRows):
    """kernel(x, out, n_cols, x_row_stride); grid n_rows, block 256: out[i] = the sum of row i. The
    primer's warm-up: the row maximum of its first kernels with + in place of the maximum."""

    def expect_lse(self, x_host, out):
        with np.errstate(invalid="ignore"):
            expected = x_host.astype(np.float64).sum(axis=1)        # -inf and +inf in one row: NaN
            scale = np.abs(x_host.astype(np.float64)).sum(axis=1)
        # a float32 sum in any order: a few ulps of the row's own sum of |x| (a bound from the case's
        # largest row would let a small row beside a large one be off by far more than its rounding)
        atol = 8 * float(np.finfo(np.float32).eps) * np.where(np.isfinite(scale), scale, 0.0)
        return [Check("out", host(out), expected, Tolerance(rtol=0.0, atol=atol), x_host, poison=checks.POISON["float32"])]


# ---- softmax + top-k, a warp per row ----------------------------------------------------------

class TopK(SoftmaxRows):
    """kernel(x, probs, columns, n_cols, k, x_row_stride); grid n_rows, block 32; k = min(4, n_cols)."""
    block = 32
    k_max = 4
    timed_shape = (16384, 256)
    ideal_bytes_per_element = 4        # read once; k pairs per row written

    def cases(self, seed: int = 0, small: bool = False):
        rows = super().cases(seed, small)
        rng = np.random.default_rng(12)
        ties = np.round(rng.standard_normal((6, 200)) * 1.5).astype(np.float32)   # many equal logits
        ties[1, :] = 2.0
        ties[2, 150:] = -np.inf
        rows.insert(1, ("rows of rounded logits: many equal values", {"x": ties}))
        one_lane = rng.standard_normal((2, 128)).astype(np.float32)
        one_lane[:, ::32] = np.array([10.0, 11.0, 12.0, 13.0], np.float32)   # ascending, all read by lane 0
        rows.insert(2, ("the four largest in one lane's slice (columns 0, 32, 64, 96), in increasing order",
                        {"x": one_lane}))
        one_lane_down = rng.standard_normal((2, 256)).astype(np.float32)
        one_lane_down[:, :128:32] = np.array([13.0, 12.0, 11.0, 10.0], np.float32)   # lane 0, decreasing, then worse ones
        rows.insert(3, ("the four largest in one lane's slice (columns 0, 32, 64, 96), decreasing, more of that lane after them",
                        {"x": one_lane_down}))
        return rows

    def launch(self, backend, name, x, probs, columns, n_cols, k, x_stride):
        backend.launch(name, (x.shape[0],), (self.block,),
                       (x, probs, columns, np.int32(n_cols), np.int32(k), np.int64(x_stride)))

    def run(self, backend, name, case, arena):
        x_host = case["x"].copy()           # a private copy: the reference is computed from it
        extra = case.get("x_extra", 0)
        n_rows, n_cols = x_host.shape
        k = min(self.k_max, n_cols)
        x = arena.input(strided(x_host, extra) if extra else x_host)
        probs = arena.output("probs", (n_rows, k), np.float32, checks.POISON["float32"])
        columns = arena.output("columns", (n_rows, k), np.int64, COLUMN_POISON)
        self.launch(backend, name, x, probs, columns, n_cols, k, n_cols + extra)
        backend.sync()
        return self.expect_topk(x_host, probs, columns, k)

    def expect_topk(self, x_host, probs, columns, k):
        from onlinesoftmax.kernels.topk.softmax_topk import order   # NaN first, then larger, then the lower column

        want_columns = order(x_host)[:, :k]
        softmax = reference.softmax(x_host)
        want_probs = np.take_along_axis(softmax, want_columns, axis=1)
        return [Check("columns", host(columns), want_columns.astype(np.float64), Tolerance(0.0, 0.0), x_host,
                      poison=COLUMN_POISON),
                Check("probs", host(probs), want_probs, self.probs_tolerance(x_host, softmax, want_columns), x_host,
                      poison=checks.POISON["float32"])]

    def probs_tolerance(self, x_host, softmax, want_columns) -> Tolerance:
        """The tests' rule with the design's own float32 baseline as well: one warp sums a row as 32
        lanes' running states (a row of 5000 is ~160 additions in sequence per lane), then a butterfly,
        and that order rounds more than a whole-row pairwise sum. The baseline is that order in NumPy
        (simulate.online_row_state with 32 threads); the larger of its error and the safe softmax's counts."""
        m, l = sim.online_row_state(x_host, n_threads=self.block)
        with np.errstate(all="ignore"):
            design = (np.exp(np.take_along_axis(x_host, want_columns, axis=1) - m[:, None]) / l[:, None]).astype(np.float32)
        want = np.take_along_axis(softmax, want_columns, axis=1)
        compared = np.isfinite(design) & np.isfinite(want)   # rows of -inf or NaN are the rule's alone
        design_error = float(np.abs(design[compared] - want[compared]).max(initial=0.0))
        rule = softmax_tolerance(x_host, softmax)
        return Tolerance(rtol=0.0, atol=max(rule.atol, checks.tolerance(design_error, softmax, np.float32)))

    def timed(self, backend, name, arena, seed: int = 0):
        x_host = np.random.default_rng(seed).standard_normal(self.timed_shape, dtype=np.float32)
        x = arena.input(x_host)
        probs = arena.output("probs", (self.timed_shape[0], self.k_max), np.float32, checks.POISON["float32"])
        columns = arena.output("columns", (self.timed_shape[0], self.k_max), np.int64, COLUMN_POISON)
        n = self.timed_shape[1]
        ideal_bytes = 4 * x.size + 12 * self.k_max * x.shape[0]     # x read once; k (fp32, int64) pairs per row
        return ((lambda: self.launch(backend, name, x, probs, columns, n, self.k_max, n)), ideal_bytes,
                lambda: self.expect_topk(x_host, probs, columns, self.k_max))


# ---- y = a * x, one thread per element ----------------------------------------------------------

class ScaleVector:
    """kernel(x, y, a, n); grid ceil(n / 256), block 256: thread blockIdx.x * blockDim.x + threadIdx.x
    writes y[i] = a * x[i] when i < n. Timed: read once, written once."""
    block = 256
    timed_shape = (1, 1 << 24)
    ideal_bytes_per_element = 8

    def entries(self, name):
        return (name,)

    def cases(self, seed: int = 0, small: bool = False):
        rng = np.random.default_rng(seed)
        hidden = int(rng.integers(300, 3000 if small else 100000))
        hidden += hidden % 256 == 0
        found = [("x = [1, 2, 3], a = 2", np.array([1.0, 2.0, 3.0], np.float32), 2.0)]
        found += [(f"{n} elements, a = {a}", rng.standard_normal(n).astype(np.float32), a)
                  for n, a in ((1, -3.0), (256, 0.5), (257, 1.5), (1000, -0.25))]
        found.append((f"hidden case: {hidden} elements of order 1e4", (rng.standard_normal(hidden) * 1e4)
                      .astype(np.float32), float(rng.uniform(0.1, 4))))
        return [(label, {"x": x, "a": a}) for label, x, a in found]

    def racecheck_case(self):
        return self.cases()[3]

    def launch(self, backend, name, x, y, a, n):
        backend.launch(name, (-(-n // self.block),), (self.block,), (x, y, np.float32(a), np.int32(n)))

    def run(self, backend, name, case, arena):
        x_host, a = case["x"].copy(), case["a"]
        x = arena.input(x_host)
        y = arena.output("y", x_host.shape, np.float32, checks.POISON["float32"])
        self.launch(backend, name, x, y, a, x_host.size)
        backend.sync()
        return self.expect(x_host, a, y)

    def expect(self, x_host, a, y):
        expected = np.float32(a) * x_host.astype(np.float64)
        rule = Tolerance(rtol=checks.EPS["float32"], atol=0.0)     # one rounding of a * x
        return [Check("y", host(y), expected, rule, poison=checks.POISON["float32"])]

    def timed(self, backend, name, arena, seed: int = 0):
        n = self.timed_shape[1]
        x_host = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
        x = arena.input(x_host)
        y = arena.output("y", (n,), np.float32, checks.POISON["float32"])
        return ((lambda: self.launch(backend, name, x, y, 2.0, n)), self.ideal_bytes_per_element * n,
                lambda: self.expect(x_host, 2.0, y))
