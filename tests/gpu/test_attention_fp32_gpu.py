"""GPU tier for attention_13_fp32_pipelined (float32, d = 64 and 128): the edge matrix of sequence
lengths, grouped-query heads, causal (bottom-right) and not, blind queries, scores in the hundreds and
near 1e10, poisoned outputs, and the API's choice and refusals. Judged as attention_01_blocked is
(test_attention_gpu.check: at most twice torch SDPA's float32 error against float64, plus two ulps;
blind rows exactly 0 and LSE -inf; the LSE against twice a float32 computation's error). The wrong
answer that rule rejects is kept in test_attention_gpu.test_a_wrong_kernel_fails_the_check.
"""
import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import fp32_pipelined as fp
from onlinesoftmax.runtime import device

from test_attention_gpu import check, check_huge_scores, make_qkv, run_kernel, to_host64, torch_error

pytestmark = pytest.mark.gpu
VARIANT = fp.PIPELINED
LENGTHS = (1, 2, 31, 33, 64, 65, 100, 257, 1000, 4097)


def has_cp_async() -> bool:
    try:
        return device.compute_capability() >= VARIANT.min_cc
    except Exception:  # noqa: BLE001  (no usable GPU: the module still collects)
        return False


needs_sm80 = pytest.mark.skipif(not has_cp_async(), reason="attention_13 needs compute capability 8.0 (cp.async)")


@needs_sm80
@pytest.mark.parametrize("d", fp.SUPPORTED_D)
@pytest.mark.parametrize("causal", (False, True), ids=("full", "causal"))
@pytest.mark.parametrize("n_q", LENGTHS)
def test_every_length_pair(d, causal, n_q):
    for n_k in LENGTHS:
        check(VARIANT, 1, 2, 1, n_q, n_k, d, "float32", causal, seed=n_q * 7919 + n_k + d)


@needs_sm80
@pytest.mark.parametrize("kv_heads", (1, 2, 8))
@pytest.mark.parametrize("n_q", (1, 70, 1000))
def test_grouped_query_heads_and_batches(kv_heads, n_q):
    check(VARIANT, 2, 8, kv_heads, n_q, 1000, 128, "float32", causal=n_q > 1, seed=kv_heads * 10 + n_q)
    check(VARIANT, 3, 4, 2, n_q, 2000, 64, "float32", causal=False, seed=kv_heads * 10 + n_q + 1)


@needs_sm80
@pytest.mark.parametrize("q_scale", (60.0, 600.0, 6000.0))
def test_large_and_extreme_scores(q_scale):
    check(VARIANT, 1, 4, 2, 5, 777, 64, "float32", causal=False, seed=11, q_scale=q_scale)
    check(VARIANT, 1, 4, 2, 200, 777, 128, "float32", causal=True, seed=12, q_scale=q_scale)


@needs_sm80
def test_scores_near_1e10():
    check_huge_scores(VARIANT, 5, 64, "float32", causal=False, seed=24)
    check_huge_scores(VARIANT, 77, 128, "float32", causal=True, seed=25)


@needs_sm80
def test_the_same_numbers_as_attention_01_to_rounding():
    """Both kernels compute the same tiles; they differ only where the scale is applied."""
    host = make_qkv(2, 4, 2, 300, 1500, 128, "float32", seed=3)
    q, k, v = (cp.asarray(a) for a in host)
    ours, _ = run_kernel(VARIANT, q, k, v, True)
    blocked, _ = run_kernel(ab.BLOCKED, q, k, v, True)
    ref, _ = ab.reference(*host, causal=True)
    gap = float(np.abs(to_host64(ours) - to_host64(blocked)).max())
    assert gap <= 2 * torch_error(host, "float32", True, ref, np.zeros(300, bool)) + 1e-6


@needs_sm80
def test_the_api_runs_it_by_name_and_refuses_what_it_lacks():
    host = make_qkv(1, 2, 1, 33, 100, 64, "float32", seed=4)
    q, k, v = (cp.asarray(a) for a in host)
    out = osm.attention(q, k, v, causal=True, variant="fp32_pipelined")
    ref, _ = ab.reference(*host, causal=True)
    assert float(np.abs(to_host64(out) - ref).max()) < 1e-5
    with pytest.raises(TypeError, match="takes float32"):
        osm.attention(q.astype(cp.float16), k.astype(cp.float16), v.astype(cp.float16), variant="fp32_pipelined")
    q96 = cp.zeros((1, 2, 3, 96), cp.float32)
    with pytest.raises(ValueError, match="head dimension d in"):
        osm.attention(q96, q96, q96, variant="fp32_pipelined")
    out = osm.attention(q, k, v + 2, causal=True, variant="fp32_pipelined")   # the context is still usable
    assert float(np.abs(to_host64(out) - (ref + 2)).max()) < 1e-5

