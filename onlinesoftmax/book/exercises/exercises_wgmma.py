"""Graders for the exercises of the page "Hopper's warpgroup instruction".

`check_k_step_descriptor(fn)` grades a reader's descriptor by what the instruction would read with
it: on a byte image of shared memory holding a tile stored as the kernels store it, the operand the
descriptor names must be the tile's columns k0 .. k0 + 15, row by row (the model of
onlinesoftmax/kernels/attention/wgmma_layout.py, which the CPU emulator and the GPU tests check).
Any descriptor that reads the right elements passes (the leading offset of a K-major operand is
not read, so its value does not matter); cases beyond the printed one are drawn at every grading.
"""
from __future__ import annotations

import secrets

import numpy as np

from onlinesoftmax.book.exercises.grading import not_answered
from onlinesoftmax.kernels.attention import wgmma_layout as wl

SHOWN = [(0, 64, 16, 128)]   # (base, rows, k0, columns): the first case, printed with a failure


def _cases(seed: int):
    """The shown case, 12 drawn ones, and one drawn past the first 64-column block (k0 >= 64), which
    every grading needs: a descriptor that forgets the blocks is right wherever k0 < 64."""
    rng = np.random.default_rng(seed)
    cases = list(SHOWN)
    for later in [False] * 12 + [True]:
        rows = int(rng.choice([64, 128]))
        columns = int(rng.choice([128, 256] if later else [64, 128, 256]))
        k0 = 16 * int(rng.integers(4 if later else 0, columns // 16))
        base = 1024 * int(rng.integers(0, 64))
        cases.append((base, rows, k0, columns))
    return cases


# the descriptor's four fields: start address (bits 0-13), leading and stride byte offsets (16-29,
# 32-45), swizzle mode (62-63); every other bit must be 0
FIELDS = (1 << 14) - 1 | ((1 << 14) - 1) << 16 | ((1 << 14) - 1) << 32 | 3 << 62


def descriptor_problem(fn, seed: int | None = None) -> str | None:
    """None when fn(base, rows, k0) names column k0's k-step of every tile, else what is wrong."""
    seed = secrets.randbits(32) if seed is None else seed
    for base, rows, k0, columns in _cases(seed):
        where = f"base {base}, rows {rows}, k0 {k0} (a {rows} x {columns} tile; hidden seed {seed})"
        tile = np.arange(rows * columns, dtype=np.uint16).reshape(rows, columns)
        memory = np.zeros(base + rows * columns * 2 + 4096, np.uint8)
        wl.store_tile(memory, base, tile)
        try:
            desc = fn(base, rows, k0)
        except Exception as error:   # the reader's bug, reported with its case
            return f"{where}: your function raised {type(error).__name__}: {error}"
        if not isinstance(desc, (int, np.integer)) or not 0 <= int(desc) < 1 << 64:
            return f"{where}: a descriptor is a 64-bit unsigned integer, got {desc!r}"
        desc = int(desc)
        if desc & ~FIELDS:
            return (f"{where}: bits {[b for b in range(64) if desc >> b & 1 and not FIELDS >> b & 1]} are set outside "
                    "the four fields (start, leading and stride offsets, swizzle); the hardware reads them too "
                    "(the base offset, bits 49-51, for one): leave them 0")
        if (desc >> 62) != wl.SWIZZLE_128B:
            return f"{where}: bits 62-63 say swizzle mode {desc >> 62}; the tiles are stored with the 128-byte swizzle (1)"
        try:
            got = wl.read_operand(memory, desc, rows, mn_major=False, decode16=lambda bits: bits)
        except IndexError:
            return f"{where}: your descriptor points outside the tile's memory"
        want = tile[:, k0:k0 + 16]
        if not np.array_equal(got, want):
            r, c = map(int, np.argwhere(got != want)[0])
            found = np.argwhere(tile == got[r, c])
            at = f"element {tuple(map(int, found[0]))} of the tile" if len(found) else "memory outside the tile"
            return (f"{where}: row {r}, k {c} of the operand reads {at}, not ({r}, {k0 + c}) "
                    f"(your descriptor decodes to {wl.decode(desc)})")
    return None


def _report(exercise: str, fn, first_args, problem_of, quiet: bool) -> bool:
    """Grade fn with problem_of (None: passed); a stub that returns None on the first case is not
    answered yet. Prints the verdict unless quiet; True when passed."""
    try:
        untouched = fn(*first_args) is None
    except Exception:   # reported with its case by problem_of
        untouched = False
    problem = None if untouched else problem_of(fn)
    if not quiet:
        print(not_answered(exercise) if untouched else
              f"{exercise}: FAILED: {problem}" if problem else f"{exercise}: passed")
    return not untouched and problem is None


def check_k_step_descriptor(fn, quiet: bool = False) -> bool:
    """fn(base, rows, k0) -> the 64-bit descriptor of the k-step at column k0 of a K-major tile of
    `rows` rows stored at byte `base` in blocks of 64 columns (each [rows][64], 128-byte swizzled)."""
    return _report("k_step_descriptor", fn, SHOWN[0][:3], descriptor_problem, quiet)


# --- exercise: which stage and which phases, for key tile j -------------------------------------

def stage_and_parities(j: int, stages: int):
    """(stage, parity of the `full` phase the consumers wait for, parity of the `empty` phase the
    producer waits for before refilling, or None when the stage is filled for the first time)."""
    stage, use = j % stages, j // stages
    return stage, use & 1, None if use == 0 else (use - 1) & 1


def parities_problem(fn) -> str | None:
    """None when fn(j, stages) gives every tile's stage and parities for 1 to 4 stages, else the first wrong one."""
    for stages in (2, 3, 1, 4):
        for j in range(4 * stages + 3):
            want = stage_and_parities(j, stages)
            try:
                got = fn(j, stages)
            except Exception as error:   # the reader's bug, reported with its case
                return f"j = {j}, stages = {stages}: your function raised {type(error).__name__}: {error}"
            if not isinstance(got, tuple) or len(got) != 3:
                return f"j = {j}, stages = {stages}: return a tuple (stage, full parity, empty parity or None), got {got!r}"
            if tuple(got) != want:
                return f"j = {j}, stages = {stages}: yours {got}, expected {want}"
    return None


def check_stage_parities(fn, quiet: bool = False) -> bool:
    """fn(j, stages) -> (stage, full parity, empty parity or None) for key tile j of a ring of `stages` stages."""
    return _report("stage_parities", fn, (0, 2), parities_problem, quiet)
