"""GPU tier for the tensor-core attention kernels (attention_03_mma, attention_04_ldmatrix,
attention_05_pipelined, attention_07_fragment_reuse, attention_10_wgmma, attention_11_wgmma_tma) in bfloat16 and float16,
d = 64 and 128.

Every output is judged against the float64 reference on the same dtype-rounded inputs, with the
rule of test_attention_gpu.py: error at most twice that of torch's scaled_dot_product_attention in
the same dtype on the same inputs (the same bottom-right mask given explicitly), plus two ulps of
the dtype at the largest |output|. Rows that see no key must be exactly 0 with LSE -inf; outputs
are poisoned first and must all be written. The LSE (fp32) may err by twice the float32 LSE's
error plus 4 fp32 ulps, plus (d / 16 + 2) fp32 ulps of the largest possible scaled score: the
tensor cores accumulate the d products of a score in fp32 but need not round each partial sum to
nearest (Fasi et al., 2021, found truncation). On small shapes the kernel is also compared with its
NumPy model (same tiles and rounding points), without the floor at 1 of the rule above: twice
the model's error plus two ulps of the largest |output|; the error message names all three errors.

Lengths N in {1, 33, 100, 257, 1000, 4097, 16384} (square and rectangular pairs), causal and not,
grouped-query ratios 1 to 8, large logits, batch > 1, the API's auto choice and strided views.

    pytest -m gpu tests/gpu/test_attention_mma_gpu.py -k quick     # about 30 s on an H200, compilation included
    pytest -m gpu tests/gpu/test_attention_mma_gpu.py              # everything (a few minutes)
"""
import numpy as np
import cupy as cp
import pytest

import onlinesoftmax as osm
from onlinesoftmax import attention_api, checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.kernels.attention import wgmma as aw
from test_wgmma_gpu import on_hopper
from test_attention_gpu import check_huge_scores, lse_fp32_error, make_qkv, on_gpu, run_kernel, to_host64, torch_error, visible

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

# attention_10_wgmma and attention_11_wgmma_tma (sm_90a's wgmma) run on compute capability 9.0 only.
VARIANTS = (*am.VARIANTS, *(pytest.param(v, marks=pytest.mark.skipif(not on_hopper(), reason=f"{v.name} needs sm_90a"))
                            for v in aw.HOPPER))
LENGTHS = (1, 33, 100, 257, 1000, 4097, 16384)
PAIRS = [(n, n) for n in LENGTHS] + [(1, 1000), (33, 4097), (100, 257), (257, 33), (1000, 100), (4097, 1000),
                                     (16384, 4097)]
MODEL_MAX_ELEMENTS = 300 * 1000     # compare with the NumPy model up to this n_q * n_k


def model_gap_tolerance(model_err: float, ref, dtype: str) -> float:
    """Kernel vs model (same rounding points): twice the model's error plus two ulps of the largest
    |output| itself (no floor at 1: attention outputs of long rows are small)."""
    return 2 * model_err + 2 * checks.EPS[dtype] * float(np.abs(ref).max())


def check_mma(variant, batch, heads, kv_heads, n_q, n_k, d, dtype, causal, seed=0, q_scale=1.0, scale=None):
    """Run `variant` through its plan and judge it (see the module doc); returns the errors."""
    host = make_qkv(batch, heads, kv_heads, n_q, n_k, d, dtype, seed, q_scale)
    q, k, v = (on_gpu(a, dtype) for a in host)
    out, lse = run_kernel(variant, q, k, v, causal, scale=scale)
    ref, lse_ref = (a.get() for a in ab.reference(*(cp.asarray(a) for a in host), causal=causal))
    blind = ~visible(n_q, n_k, causal).any(axis=1)
    y, lse = to_host64(out), lse.get()
    where = f"{variant.name} {dtype} b{batch} h{heads}/{kv_heads} n_q {n_q} n_k {n_k} d {d} causal {causal}"
    assert not np.isnan(y).any() and not np.isnan(lse).any(), f"{where}: NaN in the output"
    assert (y[..., blind, :] == 0).all() and np.isneginf(lse[..., blind]).all(), f"{where}: a blind query: 0 and -inf"
    err = float(np.abs(y - ref).max())
    base = torch_error(host, dtype, causal, ref, blind)
    tol = checks.tolerance(base, ref, dtype)
    model_err = None
    if n_q * n_k <= MODEL_MAX_ELEMENTS:
        model, _ = variant.simulate(*(checks.to_dtype(a, dtype) for a in host), causal=causal, scale=scale)
        model_err = float(np.abs(checks.as_float64(model) - ref).max())
        gap = float(np.abs(checks.as_float64(model) - y).max())
        gap_tol = model_gap_tolerance(model_err, ref, dtype)
        assert gap <= gap_tol, (f"{where}: kernel vs its model {gap:.3e} > {gap_tol:.3e} "
                                f"(kernel error {err:.3e}, model {model_err:.3e})")
    assert err <= tol, f"{where}: error {err:.3e}, torch {base:.3e}, model {model_err}, tolerance {tol:.3e}"
    if (~blind).any():
        lse_err = float(np.abs(lse[..., ~blind] - lse_ref[..., ~blind]).max())
        score_bound = (np.linalg.norm(host[0], axis=-1).max() * np.linalg.norm(host[1], axis=-1).max() / np.sqrt(d))
        eps32 = float(np.finfo(np.float32).eps)
        lse_tol = (2 * lse_fp32_error(host, causal, lse_ref)
                   + 4 * eps32 * max(1.0, float(np.abs(lse_ref[np.isfinite(lse_ref)]).max()))
                   + (d / 16 + 2) * eps32 * score_bound)
        assert lse_err <= lse_tol, f"{where}: LSE error {lse_err:.3e}, tolerance {lse_tol:.3e}"
    return err, base, model_err


QUICK = [   # (batch, heads, kv_heads, n_q, n_k, d, dtype, causal, q_scale)
    (1, 2, 1, 1, 1, 64, "float16", False, 1.0),
    (1, 2, 1, 33, 100, 64, "bfloat16", True, 1.0),
    (1, 2, 1, 100, 33, 64, "bfloat16", True, 1.0),           # 67 rows see no key
    (1, 4, 2, 257, 1000, 128, "bfloat16", True, 1.0),
    (2, 2, 2, 1000, 257, 128, "float16", False, 1.0),
    (1, 8, 1, 4097, 4097, 128, "bfloat16", True, 1.0),       # 8 query heads on one kv head
    (1, 4, 4, 300, 777, 64, "float16", False, 60.0),         # scores in the hundreds
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_quick_the_ladder(variant):
    for batch, heads, kv_heads, n_q, n_k, d, dtype, causal, q_scale in QUICK:
        check_mma(variant, batch, heads, kv_heads, n_q, n_k, d, dtype, causal, seed=n_q + n_k, q_scale=q_scale)


def test_quick_auto_and_views():
    """auto runs a tensor-core kernel for 16-bit prefill here (wgmma fed by TMA on compute capability 9.0),
    on a (batch, seq, heads, d) view."""
    expected = aw.WGMMA_TMA if on_hopper() else am.FASTEST
    assert attention_api.choose("bfloat16", 300, 128).variant is expected
    host = make_qkv(2, 4, 2, 300, 500, 128, "bfloat16", seed=5)
    ref, lse_ref = ab.reference(*host, causal=True)
    q, k, v = (on_gpu(np.ascontiguousarray(a.transpose(0, 2, 1, 3)), "bfloat16").transpose(0, 2, 1, 3) for a in host)
    assert not q.flags.c_contiguous
    out, lse = osm.attention(q, k, v, causal=True, return_lse=True)
    assert out.dtype == q.dtype and out.shape == q.shape and lse.shape == (2, 4, 300)
    err = float(np.abs(to_host64(out) - ref).max())
    tol = checks.tolerance(torch_error(host, "bfloat16", True, ref, np.zeros(300, bool)), ref, "bfloat16")
    assert err <= tol, f"error {err:.3e}, tolerance {tol:.3e}"
    assert float(np.abs(lse.get() - lse_ref).max()) < 1e-3


def test_quick_the_check_fails_on_a_wrong_scale():
    """The rule can fail: the kernel run with a scale 5 % off is rejected against the true reference."""
    with pytest.raises(AssertionError, match="error"):
        check_mma(am.FASTEST, 1, 2, 1, 257, 1000, 128, "bfloat16", False, seed=1, scale=1.05 / np.sqrt(128))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("dtype", am.DTYPES)
@pytest.mark.parametrize("d", am.SUPPORTED_D)
@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
def test_every_length_pair(variant, dtype, d, causal):
    for n_q, n_k in PAIRS:
        check_mma(variant, 1, 2, 1, n_q, n_k, d, dtype, causal, seed=n_q * 7919 + n_k + d)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("kv_heads", (1, 2, 4, 8))
def test_grouped_query_heads(variant, kv_heads):
    for dtype in am.DTYPES:
        check_mma(variant, 2, 8, kv_heads, 1000, 1000, 128, dtype, causal=True, seed=kv_heads)
        check_mma(variant, 1, 8, kv_heads, 77, 3000, 64, dtype, causal=False, seed=kv_heads + 1)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("dtype", am.DTYPES)
def test_large_logits_and_batches(variant, dtype):
    check_mma(variant, 1, 4, 2, 129, 777, 64, dtype, causal=False, seed=11, q_scale=60.0)
    check_mma(variant, 1, 4, 2, 777, 129, 128, dtype, causal=True, seed=12, q_scale=60.0)
    check_mma(variant, 3, 6, 3, 200, 4097, 128, dtype, causal=True, seed=13)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("dtype", am.DTYPES)
@pytest.mark.parametrize("q_scale", (600.0, 6000.0))
def test_extreme_scores(variant, dtype, q_scale):
    """The extreme-row matrix for the tensor-core kernels: scores of 1e4 .. 1e5, against torch's error in
    the same dtype (its FLASH kernel folds the scale into the exponent's fma too)."""
    check_mma(variant, 1, 4, 2, 129, 777, 64, dtype, causal=False, seed=31, q_scale=q_scale)
    check_mma(variant, 1, 4, 2, 200, 777, 128, dtype, causal=True, seed=32, q_scale=q_scale)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("dtype", am.DTYPES)
def test_scores_near_1e10(variant, dtype):
    """One-hot rows of scores near 1e10 (fp16: 2e8): only the output's rounding is allowed. The fma
    fold 2^fma(s, scale log2 e, -m) fails here (m's rounding, hundreds, stays in the exponent)."""
    check_huge_scores(variant, 129, 64, dtype, causal=False, seed=33)
    check_huge_scores(variant, 200, 128, dtype, causal=True, seed=34)
