"""CPU tier for attention_06_decode_mma (grouped heads on tensor cores): its NumPy model against the
float64 reference, the kernel's own CUDA source run by the CPU emulator against the reference and
the model (error rule: at most twice the model's error plus two ulps; the model has the kernel's
rounding points), rows that see no key, the split and row-chunk shapes, and what variant="auto"
takes. Needs g++ for the emulated part (required under CI=true)."""

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import attention_api, checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import decode_mma as dm


def make(batch, heads, kv_heads, n_q, n_k, d, dtype, seed):
    rng = np.random.default_rng(seed)
    return [checks.to_dtype(rng.standard_normal(s).astype(np.float32), dtype)
            for s in ((batch, heads, n_q, d), (batch, kv_heads, n_k, d), (batch, kv_heads, n_k, d))]


def judge(out, lse, q, k, v, causal):
    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
    model, _ = dm.simulate(q, k, v, causal)
    y, model = checks.as_float64(out), checks.as_float64(model)
    blind = ~np.isfinite(lse_ref)
    assert not np.isnan(y).any() and not np.isnan(lse).any()
    assert (y[blind] == 0).all() and np.isneginf(lse[blind]).all()
    model_err = float(np.abs(model - ref).max())
    assert float(np.abs(y - ref).max()) <= checks.tolerance(model_err, ref, q.dtype.name)
    assert float(np.abs(y - model).max()) <= 2 * model_err + 2 * checks.EPS[q.dtype.name] * float(np.abs(ref).max())
    assert float(np.abs(lse[~blind] - lse_ref[~blind]).max(initial=0)) <= 1e-5 * max(1, float(np.abs(lse_ref[~blind]).max(initial=1)))


SHAPES = [(1, 8, 2, 1, 100, 128, False, "bfloat16"), (2, 4, 1, 3, 333, 64, True, "float16"),
          (1, 8, 1, 1, 1, 64, False, "bfloat16"), (1, 16, 1, 2, 700, 128, True, "bfloat16"),
          (1, 4, 2, 5, 3, 64, True, "float16")]   # 32 rows in 4 chunks; n_q > n_k: blind rows


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_model_is_within_the_rule(shape):
    *dims, causal, dtype = shape
    q, k, v = make(*dims, dtype, seed=sum(dims))
    out, lse = dm.simulate(q, k, v, causal)
    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
    assert float(np.abs(checks.as_float64(out) - ref).max()) <= 4 * checks.EPS[dtype] * max(1, float(np.abs(ref).max()))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernel_source_on_the_emulator(shape, needs_emulator):
    *dims, causal, dtype = shape
    q, k, v = make(*dims, dtype, seed=sum(dims))
    out, lse = dm.emulate(q, k, v, causal, seed=3)
    judge(out, lse, q, k, v, causal)


def test_splits_and_row_chunks():
    assert dm.row_chunks(32, 8, 1) == 1 and dm.row_chunks(16, 1, 2) == 4 and dm.row_chunks(6, 2, 8) == 3
    splits, keys = dm.splits_for(1, 32, 8, 1, 32768, 132)
    assert splits > 1 and splits * keys >= 32768 and keys % 32 == 0


def test_auto_takes_it_for_grouped_16_bit_decode():
    assert attention_api.choose("bfloat16", 1, 128, cc=90, group=4).variant is dm.DECODE_MMA
    assert attention_api.choose("float16", 8, 64, cc=90, group=2).variant is dm.DECODE_MMA
    assert attention_api.choose("bfloat16", 1, 128, cc=90, group=1).variant is ab.DECODE      # one head per kv head
    assert attention_api.choose("float32", 1, 128, cc=90, group=4).variant is ab.DECODE
    assert attention_api.choose("bfloat16", 1, 96, cc=90, group=4).variant is ab.DECODE       # d not built
    assert attention_api.choose("bfloat16", 1, 128, cc=75, group=4).variant is ab.DECODE      # no bf16 mma
    # one head per kv head: attention_06 where it was measured ahead (batch x kv heads caches, n_k keys)
    mha = lambda caches, n_k: attention_api.choose("bfloat16", 1, 128, cc=90, group=1, caches=caches, n_k=n_k).variant  # noqa: E731
    assert mha(32, 4096) is ab.DECODE and mha(32, 32768) is dm.DECODE_MMA and mha(32, 262144) is dm.DECODE_MMA
    assert mha(256, 4096) is dm.DECODE_MMA and mha(1024, 32768) is ab.DECODE
    assert attention_api.choose("float32", 1, 128, cc=90, group=1, caches=32, n_k=32768).variant is ab.DECODE
    q, k, v = make(1, 8, 2, 1, 50, 64, "bfloat16", 0)
    out = osm.attention(q, k, v)                      # numpy in: the chosen kernel's model
    assert (checks.as_float64(out) == checks.as_float64(dm.simulate(q, k, v)[0])).all()
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        osm.attention(*(np.asarray(a, np.float32) for a in (q, k, v)), variant="decode_mma")
