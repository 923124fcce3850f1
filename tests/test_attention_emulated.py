"""CPU tier: the tensor-core attention kernels' own CUDA source (attention_03_mma,
attention_04_ldmatrix, attention_05_pipelined) run on the CPU by the emulator of kernels/emulator/
(onlinesoftmax/runtime/emulator.py, through attention_mma.emulate: one fiber per thread, barriers,
warp-collective mma.sync / ldmatrix / shuffles computed from the PTX ISA's definitions, cp.async
copies landing only at the wait, shared memory poisoned with NaN, inputs and outputs followed by
inaccessible pages, warps interleaved at random; the launch in a child process).

Each kernel is checked on awkward shapes against the float64 reference with the error rule (at most
twice the error of the kernels' NumPy model, which has the same rounding points, plus two ulps), and
against the model itself (twice the model's error plus two ulps of the largest |output|), LSE
within 1e-5 relative, rows that see no key exactly 0 and -inf, every output written. Then
deliberately broken copies of the kernels (a barrier removed, the swizzle or .trans dropped, the
mask or the zero fill or the cp.async wait left out, the -inf guard off) must be rejected: that
is what makes the check worth having. The emulator's own fragment maps are compared with
mma_fragments.py's, and every schedule gives the same bits. Needs a C++17 compiler with _Float16 (g++ 12); skipped without one except
under CI=true.
"""
import contextlib

import numpy as np
import pytest

from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.kernels.attention import mma_fragments as mf
from onlinesoftmax.runtime import emulator
from onlinesoftmax.runtime.loader import KERNELS_DIR

STEMS = [v.name for v in am.VARIANTS]
MODELS = {v.name: v.simulate for v in am.VARIANTS}


pytestmark = pytest.mark.usefixtures("needs_emulator")   # tests/conftest.py


def make_qkv(batch, heads, kv_heads, n_q, n_k, d, dtype, seed, q_scale=1.0):
    rng = np.random.default_rng(seed)
    draw = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return (checks.to_dtype(draw(batch, heads, n_q, d) * np.float32(q_scale), dtype),
            checks.to_dtype(draw(batch, kv_heads, n_k, d), dtype), checks.to_dtype(draw(batch, kv_heads, n_k, d), dtype))


def emulate(stem, q, k, v, causal, seed=1, **build):
    return am.emulate(stem, q, k, v, causal, seed=seed, **build)


def judge(out, lse, q, k, v, causal, stem="attention_05_pipelined", scale=None) -> str | None:
    """None when the emulated kernel's answer passes the rule, else what is wrong."""
    out = checks.as_float64(out)
    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal, scale=scale)
    model, _ = MODELS[stem](q, k, v, causal=causal, scale=scale)
    if np.isnan(out).any() or np.isnan(lse).any():
        return "NaN in the output"
    blind = ~np.isfinite(lse_ref)
    if not ((out[blind] == 0).all() and np.isneginf(lse[blind]).all() and np.isfinite(lse[~blind]).all()):
        return "rows that see no key must give 0 and LSE -inf, the others a finite LSE"
    err = float(np.abs(out - ref).max())
    model_err = float(np.abs(checks.as_float64(model) - ref).max())
    tol = checks.tolerance(model_err, ref, q.dtype.name)
    if err > tol:
        return f"error {err:.3e} > tolerance {tol:.3e}"
    gap = float(np.abs(out - checks.as_float64(model)).max())   # same rounding points: no floor at 1
    gap_tol = 2 * model_err + 2 * checks.EPS[q.dtype.name] * float(np.abs(ref).max())
    if gap > gap_tol:
        return f"kernel vs its model {gap:.3e} > {gap_tol:.3e}"
    lse_err = float(np.abs(lse[~blind] - lse_ref[~blind]).max(initial=0))
    if lse_err > 1e-5 * max(1.0, float(np.abs(lse_ref[~blind]).max(initial=1))):
        return f"LSE error {lse_err:.3e}"
    return None


SHAPES = [   # (batch, heads, kv_heads, n_q, n_k, d, causal, dtype, q_scale)
    (1, 2, 1, 1, 1, 64, False, "bfloat16", 1.0),
    (1, 2, 2, 33, 100, 64, True, "float16", 1.0),
    (1, 4, 2, 200, 65, 128, True, "bfloat16", 1.0),       # n_q > n_k: 135 rows see no key
    (2, 2, 1, 130, 257, 128, False, "float16", 1.0),      # two query tiles, a short last key tile
    (1, 8, 1, 70, 300, 64, True, "bfloat16", 1.0),        # 8 query heads on one kv head
    (1, 2, 2, 129, 192, 64, False, "bfloat16", 30.0),     # scores in the hundreds
]


@pytest.mark.parametrize("stem", STEMS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_h{}-{}_q{}_k{}_d{}_{}_{}".format(
    *s[:6], "causal" if s[6] else "full", s[7]))
def test_the_kernel_source_on_the_emulator(stem, shape):
    """Shapes of up to 10,000 scores run with the emulator's per-access checks (races, bounds,
    alignment); the larger ones, which check the tiles' numbers, without them (5x faster)."""
    *dims, causal, dtype, q_scale = shape
    q, k, v = make_qkv(*dims, dtype, seed=sum(dims), q_scale=q_scale)
    checked = dims[3] * dims[4] <= 10_000
    with contextlib.nullcontext() if checked else emulator.uninstrumented():
        out, lse = emulate(stem, q, k, v, causal, seed=sum(dims))
    problem = judge(out, lse, q, k, v, causal, stem)
    assert problem is None, f"{stem} {shape}: {problem}"


@pytest.mark.parametrize("scale", (-0.2, 0.0, 0.05))
def test_fragment_reuse_takes_any_finite_scale(scale):
    """attention_07 folds a positive scale into the exponent's fma and scales first otherwise."""
    q, k, v = make_qkv(1, 2, 1, 70, 100, 128, "bfloat16", seed=6)
    out, lse = emulate(am.REUSE, q, k, v, True, seed=2, scale=scale)
    problem = judge(out, lse, q, k, v, True, am.REUSE, scale=scale)
    assert problem is None, f"scale {scale}: {problem}"


def test_the_emulator_reads_fragments_as_mma_fragments_says():
    maps = {"A": mf.A_MAP, "B": mf.B_MAP}
    elements = emulator.Module(KERNELS_DIR / "attention" / f"{STEMS[0]}.cu", []).fragment_maps()
    assert len(elements) == 32 * (8 + 4 + 4)
    for kind, lane, reg, half, row, col in elements:
        expected = mf.C_MAP[lane, reg] if kind == "C" else maps[kind][lane, reg, half]
        assert expected.tolist() == [row, col], (kind, lane, reg, half)


def kernel_text(stem: str) -> str:
    """The kernel's file with the shared body it includes (fragment_reuse.cuh) written in place, so
    that a mutant may change either."""
    text = (KERNELS_DIR / "attention" / f"{stem}.cu").read_text()
    include = '#include "fragment_reuse.cuh"'
    return text.replace(include, (KERNELS_DIR / "common" / "fragment_reuse.cuh").read_text()) if include in text else text


MUTANTS = [   # (kernel, text to change, replacement, what it breaks)
    ("attention_03_mma", "__syncthreads();   // every warp is done with the previous tile's Ks and Vs", "",
     "the barrier before a tile is overwritten"),
    ("attention_04_ldmatrix", "ldmatrix_x4(b, Ks + swizzled<D>(8 * j + k_row, 16 * kk + k_col))",
     "ldmatrix_x4(b, Ks + (8 * j + k_row) * D + 16 * kk + k_col)", "K read without the swizzle it was stored with"),
    ("attention_04_ldmatrix", "ldmatrix_x4_trans(b, Vs", "ldmatrix_x4(b, Vs", "V read without .trans"),
    ("attention_05_pipelined", "cp_async_wait_all_groups();", "", "the wait for the copies"),
    ("attention_05_pipelined", "__syncthreads();              // everyone's have; and every warp is done with the other stage",
     "", "the barrier after the wait"),
    ("attention_05_pipelined", "k0 + MMA_BLOCK_K > keys.unmasked_end", "false", "the mask of partial tiles"),
    ("attention_05_pipelined", "const bool inside = k0 + row < n_k;", "const bool inside = true;",
     "the zero fill of keys past n_k"),
    ("attention_07_fragment_reuse", "(q_lane ^ (kk << 4))", "(q_lane + (kk << 4))", "Q read past its swizzle"),
    ("attention_07_fragment_reuse", "if (__any_sync(", "if (false && __any_sync(", "the rescale when a row max moves"),
    ("attention_07_fragment_reuse", "T::mma(s[1][j + 1], a[1], b + 2);", "", "the second m-tile's product"),
    ("attention_07_fragment_reuse", "const bool inside = r0 + row + c * STEP < n;", "const bool inside = true;",
     "the zero fill of keys past n_k in attention_07"),
]


@pytest.mark.parametrize("stem, old, new, why", MUTANTS, ids=[m[3].replace(" ", "_") for m in MUTANTS])
def test_a_broken_kernel_is_rejected(stem, old, new, why):
    source = kernel_text(stem)
    assert old in source, f"the mutant's text is gone from {stem}.cu: update MUTANTS"
    q, k, v = make_qkv(1, 2, 1, 150, 200, 64, "bfloat16", seed=3)     # causal, a short last key tile
    try:
        out, lse = emulate(stem, q, k, v, True, seed=5, source=source.replace(old, new, 1), optimize="-O1")
    except emulator.EmulatorFault:                    # caught by the emulator (a build error fails the test)
        return
    assert judge(out, lse, q, k, v, True, stem) is not None, f"a kernel without {why} passed"


def test_every_schedule_gives_the_same_bits():
    """Each output element is summed by the same lanes in the same order whatever the interleaving:
    the fixed order and two random ones must agree to the bit (a race would make them differ)."""
    q, k, v = make_qkv(1, 2, 1, 150, 130, 64, "bfloat16", seed=8)
    runs = [am.emulate("attention_05_pipelined", q, k, v, True, schedule=schedule, seed=seed)
            for schedule, seed in (("fixed", 0), ("random", 1), ("random", 2))]
    bits = [(out.view(np.uint16), lse.view(np.uint32)) for out, lse in runs]
    for out, lse in bits[1:]:
        assert (out == bits[0][0]).all() and (lse == bits[0][1]).all()
    assert judge(*runs[0], q, k, v, True) is None


def test_the_unguarded_softmax_is_rejected():
    """-DONLINE_SOFTMAX_GUARDS=0 (online_state.cuh): rows that see no key compute 2^(-inf - -inf)."""
    q, k, v = make_qkv(1, 2, 1, 100, 40, 64, "float16", seed=4)
    out, lse = emulate("attention_05_pipelined", q, k, v, True, flags=("-DONLINE_SOFTMAX_GUARDS=0",), optimize="-O1")
    assert judge(out, lse, q, k, v, True) is not None


def huge_scores(n_q, n_k, d, seed):
    """Scores near 1e10 (q and k of order 3e5 in bfloat16): one-hot rows."""
    q, k, v = make_qkv(1, 2, 1, n_q, n_k, d, "bfloat16", seed=seed, q_scale=3e5)
    return q, checks.to_dtype(np.asarray(k, np.float32) * np.float32(3e5), "bfloat16"), v


@pytest.mark.parametrize("stem", STEMS)
def test_scores_near_1e10_on_the_emulator(stem):
    """The max's own term must be 2^0 = 1 exactly: the scaled score is rounded before m is subtracted."""
    q, k, v = huge_scores(70, 130, 128, seed=9)
    out, lse = emulate(stem, q, k, v, True, seed=3)
    problem = judge(out, lse, q, k, v, True, stem)
    assert problem is None, f"{stem} near 1e10: {problem}"


def test_the_fused_exponent_is_rejected_near_1e10():
    """The wrong answer: attention_07's exponent as one fma leaves m's rounding (hundreds) in it."""
    stem = "attention_07_fragment_reuse"
    source = kernel_text(stem)
    old = "exp2_ftz(__fmul_rn(s[i][j][e], fold) - base)"
    assert old in source, "the exponent's text is gone from attention_07: update this test"
    q, k, v = huge_scores(70, 130, 128, seed=9)
    out, lse = emulate(stem, q, k, v, True, seed=3, source=source.replace(old, "exp2_ftz(fmaf(s[i][j][e], fold, -base))"))
    assert judge(out, lse, q, k, v, True, stem) is not None, "the fused exponent passed near 1e10"


@pytest.mark.parametrize("stem", STEMS)
def test_a_nan_query_gives_a_nan_row_on_the_emulator(stem):
    q, k, v = make_qkv(1, 2, 1, 40, 100, 64, "bfloat16", seed=10)
    q = np.array(q)
    q[0, 1, 7, 3] = np.nan
    out, lse = emulate(stem, q, k, v, False, seed=4)
    y = checks.as_float64(out)
    assert np.isnan(y[0, 1, 7]).all() and np.isnan(lse[0, 1, 7]), f"{stem}: a NaN query must give NaN"
    y[0, 1, 7] = 0
    lse = np.array(lse)
    lse[0, 1, 7] = 0
    assert not np.isnan(y).any() and not np.isnan(lse).any(), f"{stem}: NaN leaked into other queries"
