"""Graders for the exercises of the chapter "FlashAttention-2 on tensor cores".

Each `check_<exercise>(fn)` runs the reader's function on a small readable case and then on
others, prints "<exercise>: passed" or the first problem (yours vs expected) and returns True or
False (grading.py). `grade_kernel` builds a fixed copy of the fix-the-bug kernel and runs its own
source on the CPU emulator (onlinesoftmax/runtime/emulator.py), so it needs a C++ compiler, not a GPU.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.book.exercises.grading import Case, Tolerance, describe, grade, not_answered
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.kernels.attention import mma_fragments as mf
from onlinesoftmax.runtime.loader import REPO_ROOT

EXACT = Tolerance(rtol=0.0, atol=0.0)


# --- exercise: who holds element (row, col) of the accumulator --------------------------------

def c_owner(rows, cols):
    """(lane, index) holding element (row, col) of a 16 x 8 C/D fragment (the inverse of C_MAP)."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    return 4 * (rows % 8) + cols // 2, 2 * (rows // 8) + cols % 2


def check_c_owner(fn, quiet: bool = False) -> bool:
    """fn(row, col) -> (lane, index) for one element of the accumulator tile (ints in, ints out)."""
    try:
        untouched = fn(0, 0) is None
    except Exception:      # reported with its case by grade() below
        untouched = False
    if untouched:
        if not quiet:
            print(not_answered("c_owner"))
        return False

    def every_element(rows, cols):
        pairs = []
        for r, c in zip(rows, cols):
            p = fn(int(r), int(c))
            if p is None or np.ndim(p) != 1 or len(p) != 2:   # say what it did return, not "None"
                raise ValueError(f"for (row, col) = ({int(r)}, {int(c)}) your function returned {describe(p)}; "
                                 "expected a pair (lane, index)")
            pairs.append(p)
        return tuple(np.array([int(p[i]) for p in pairs]) for i in (0, 1))

    row0 = (np.zeros(8, int), np.arange(8))
    rows, cols = np.divmod(np.arange(128), 8)
    cases = [Case("row 0, columns 0 .. 7", row0, rows_arg=None), Case("row 9 (lower half)", (np.full(8, 9), np.arange(8)),
                                                                      rows_arg=None),
             Case("all 128 elements", (rows, cols), rows_arg=None)]
    return grade("c_owner", every_element, cases, c_owner, ("lane", "index"), EXACT, quiet=quiet,
                 hidden=lambda rng: [Case("random elements", tuple(np.divmod(rng.permutation(128)[:16], 8)),
                                          rows_arg=None)])


# --- exercise: P's A fragment straight from the score accumulators ------------------------------

def _scores(labels: bool, seed: int = 0):
    S = np.arange(16 * 64, dtype=np.float64).reshape(16, 64) if labels else \
        np.random.default_rng(seed).standard_normal((16, 64))
    return np.stack([mf.gather(S[:, 8 * j:8 * j + 8], mf.C_MAP) for j in range(8)]), S


def p_fragment_expected(s, kk):
    S = np.concatenate([mf.scatter(s[j], mf.C_MAP, (16, 8)) for j in range(8)], axis=1)
    return mf.gather(S[:, 16 * kk:16 * kk + 16], mf.A_MAP)


def check_p_fragment(fn, quiet: bool = False) -> bool:
    """fn(s, kk) -> (32, 4, 2): the A fragment of keys 16kk .. 16kk+15 of P, from s (8, 32, 4), the
    score accumulators of eight n-tiles of 8 keys (s[j, lane, i] as C_MAP says)."""
    labelled, _ = _scores(True)
    random, _ = _scores(False, seed=1)
    cases = [Case("scores S[r, c] = 64 r + c, kk = 0", (labelled, 0), rows_arg=None),
             Case("the same, kk = 3", (labelled, 3), rows_arg=None),
             Case("random scores, kk = 1", (random, 1), rows_arg=None),
             Case("random scores, kk = 2", (random, 2), rows_arg=None)]
    def hidden(rng):
        scores, _ = _scores(False, seed=int(rng.integers(2**31)))
        return [Case("random scores", (scores, int(rng.integers(4))), rows_arg=None)]
    return grade("p_fragment", fn, cases, p_fragment_expected, ("a",), EXACT, quiet=quiet, hidden=hidden)


# --- exercise: a conflict-free layout of your own -----------------------------------------------

def swizzle_problem(fn) -> str | None:
    """What is wrong with layout fn(row, col, d) -> element offset for K and V tiles (None: nothing)."""
    for d in am.SUPPORTED_D:
        rows, cols = np.meshgrid(np.arange(mf.KEYS), np.arange(d), indexing="ij")
        try:
            offsets = np.asarray(fn(rows, cols, d))
        except Exception as error:      # the reader's bug, reported
            return f"your function raised {type(error).__name__}: {error} (row and col are arrays of shape {rows.shape})"
        if offsets.shape != rows.shape:
            return f"d = {d}: expected offsets of shape {rows.shape} (one per element), got {offsets.shape}"
        if sorted(offsets.reshape(-1).tolist()) != list(range(mf.KEYS * d)):
            return f"d = {d}: the offsets are not a permutation of 0 .. {mf.KEYS * d - 1}: two elements share a place"
        if not (offsets // d == rows).all():
            return f"d = {d}: an element left its row (keep row r in offsets r*d .. r*d + d - 1)"
        if not (offsets == offsets[:, (cols[0] // 8) * 8] + cols % 8).all() or (offsets[:, ::8] % 8).any():
            return f"d = {d}: the 8 elements of a 16-byte chunk must stay together, in order, at a multiple of 8"
        counts = mf.tile_wavefronts(4, d, layout=fn)
        for what in ("K", "V", "stores"):
            ideal = 4 * counts[what]["instructions"]
            if counts[what]["wavefronts"] != ideal:
                return (f"d = {d}: {what} {'ldmatrix loads' if what != 'stores' else '16-byte stores'} take "
                        f"{counts[what]['wavefronts']} wavefronts per key tile, {ideal} without bank conflicts")
    return None


def check_swizzle(fn, quiet: bool = False) -> bool:
    """fn(row, col, d) -> offsets (numpy arrays in, out): a layout of a 64 x d tile that keeps
    16-byte chunks whole and lets attention_04's ldmatrix loads and 16-byte stores run conflict-free."""
    try:
        untouched = fn(0, 0, 64) is None
    except Exception:
        untouched = False
    problem = not_answered("swizzle") if untouched else swizzle_problem(fn)
    if not quiet:
        print(problem if untouched else (f"swizzle: FAILED: {problem}" if problem else "swizzle: passed"))
    return problem is None


# --- exercise: fix the kernel (graded on the CPU emulator) -----------------------------------

KERNEL_EXERCISE = "attention_fix_p_fragment"
EXERCISES_DIR = REPO_ROOT / "exercises"
GRADE_SHAPES = [   # (batch, heads, kv_heads, n_q, n_k, d, causal, dtype)
    (1, 2, 1, 20, 48, 64, False, "bfloat16"), (1, 2, 2, 150, 200, 64, True, "float16"),
    (1, 2, 1, 40, 70, 128, True, "bfloat16")]


def start_kernel(folder: Path | None = None) -> Path:
    """Copy the starter to exercises/attention_fix_p_fragment.cu (kept if it is there) and return its path."""
    path = (folder or EXERCISES_DIR) / f"{KERNEL_EXERCISE}.cu"
    if not path.exists():
        shutil.copyfile(EXERCISES_DIR / "starters" / path.name, path)
    return path


def grade_kernel(path: Path | None = None, quiet: bool = False) -> bool:
    """Build the kernel at `path` (default exercises/attention_fix_p_fragment.cu) for the CPU emulator,
    run it on a few shapes and judge it against the float64 reference and the kernels' model."""
    from onlinesoftmax.runtime import emulator

    def say(text):
        if not quiet:
            print(text)

    path = Path(path or EXERCISES_DIR / f"{KERNEL_EXERCISE}.cu")
    if not emulator.available():
        say(f"{KERNEL_EXERCISE}: the CPU emulator needs a C++ compiler (g++); none was found")
        return False
    for batch, heads, kv_heads, n_q, n_k, d, causal, dtype in GRADE_SHAPES:
        rng = np.random.default_rng(n_q + n_k)
        q, k, v = (checks.to_dtype(rng.standard_normal(shape).astype(np.float32), dtype) for shape in
                   ((batch, heads, n_q, d), (batch, kv_heads, n_k, d), (batch, kv_heads, n_k, d)))
        where = f"n_q {n_q}, n_k {n_k}, d {d}, {'causal' if causal else 'full'}, {dtype}"
        try:   # the launcher of attention_04_ldmatrix, whose copy the exercise is
            out, lse = am.emulate("attention_04_ldmatrix", q, k, v, causal, path=path, stem=KERNEL_EXERCISE)
        except emulator.EmulatorBuildError as error:
            say(f"{KERNEL_EXERCISE}: FAILED to build:\n{error}")
            return False
        except emulator.EmulatorError as error:
            say(f"{KERNEL_EXERCISE}: FAILED on {where}: {error}")
            return False
        ref, _ = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
        model, _ = am.simulate(q, k, v, causal=causal)
        model_err = float(np.abs(checks.as_float64(model) - ref).max())
        err = float(np.abs(checks.as_float64(out) - ref).max())
        tol = 2 * model_err + 2 * checks.EPS[dtype] * float(np.abs(ref).max())
        if not err <= tol:
            row = int(np.unravel_index(np.nanargmax(np.abs(checks.as_float64(out) - ref)), ref.shape)[2])
            say(f"{KERNEL_EXERCISE}: FAILED on {where}: error {err:.3e} > tolerance {tol:.3e} (first at query row {row})")
            return False
    say(f"{KERNEL_EXERCISE}: passed ({len(GRADE_SHAPES)} shapes, the kernel's own source on the CPU emulator)")
    return True
