"""The blocked attention forward's NumPy model against the float64 reference (the CUDA kernel is
not written yet): awkward lengths, causal bottom-right, grouped-query heads, rows that see no key,
and the API's input errors."""
import numpy as np
import pytest

from onlinesoftmax import attention_api as att, checks
from onlinesoftmax.kernels.attention import blocked as ab


def qkv(batch, heads, kv_heads, n_q, n_k, d, dtype="float32", seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    make = lambda *shape: checks.to_dtype((rng.standard_normal(shape) * scale).astype(np.float32), dtype)
    return make(batch, heads, n_q, d), make(batch, kv_heads, n_k, d), make(batch, kv_heads, n_k, d)


def error_vs_baseline(q, k, v, causal):
    out, lse = att.attention(q, k, v, causal=causal, return_lse=True)
    ref, ref_lse = ab.reference(q, k, v, causal=causal)
    # the same-dtype baseline: the whole score matrix in float32, rounded once to q's dtype
    q32, k32, v32 = (np.asarray(a, np.float32) for a in (q, k, v))
    base, _ = ab.reference(q32, k32, v32, causal=causal)
    base = checks.to_dtype(base.astype(np.float32), q.dtype.name).astype(np.float64)
    err = np.abs(np.asarray(out, np.float64) - ref).max()
    base_err = np.abs(base - ref).max()
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isinf(lse), ~finite)
    assert np.abs(lse[finite] - ref_lse[finite]).max(initial=0) <= 1e-5 * max(1, np.abs(ref_lse[finite]).max(initial=1))
    return err, base_err


@pytest.mark.parametrize("n_q, n_k", [(1, 1), (1, 257), (2, 31), (33, 33), (100, 1000), (257, 100), (64, 4097)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_model_matches_the_reference(n_q, n_k, causal):
    q, k, v = qkv(1, 4, 2, n_q, n_k, 64, seed=n_q + n_k)
    err, base_err = error_vs_baseline(q, k, v, causal)
    assert err <= 2 * base_err + 1e-6, (err, base_err)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_inputs_and_large_logits(dtype):
    q, k, v = qkv(2, 8, 1, 37, 300, 128, dtype, seed=3, scale=4.0)   # scaled: scores of several hundred
    err, base_err = error_vs_baseline(q, k, v, causal=True)
    assert err <= 2 * base_err + 2 * checks.EPS[dtype]


def test_causal_is_bottom_right_and_a_blind_query_is_zero():
    q, k, v = qkv(1, 1, 1, 5, 3, 32, seed=1)
    out, lse = att.attention(q, k, v, causal=True, return_lse=True)
    # n_q = 5 > n_k = 3: queries 0 and 1 see no key; query 4 sees all three
    assert (out[0, 0, :2] == 0).all() and np.isneginf(lse[0, 0, :2]).all()
    full = att.attention(q[:, :, 4:], k, v)
    np.testing.assert_allclose(out[0, 0, 4], full[0, 0, 0], rtol=1e-5, atol=1e-6)   # the same row in a tile of 5 or of 1: matmul rounding
    # with n_q == n_k, bottom-right and top-left agree: an explicit lower-triangular mask
    q, k, v = qkv(1, 2, 2, 70, 70, 32, seed=2)
    ref, _ = ab.reference(q, k, v)
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(32)
    s = np.where(np.tril(np.ones((70, 70), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    explicit = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    np.testing.assert_allclose(att.attention(q, k, v, causal=True), explicit, rtol=2e-5, atol=1e-6)


def test_grouped_query_heads_read_their_kv_head():
    q, k, v = qkv(1, 4, 2, 10, 50, 32, seed=5)
    out = att.attention(q, k, v)
    single = att.attention(q[:, 2:3], k[:, 1:2], v[:, 1:2])   # query head 2 reads kv head 2 // 2 = 1
    np.testing.assert_array_equal(out[:, 2:3], single)


@pytest.mark.parametrize("change, error, match", [
    (lambda q, k, v: (q.astype(np.int32), k, v), TypeError, "float32, float16, bfloat16 or float64, got int32"),
    (lambda q, k, v: (q.astype(np.float64), k, v), TypeError, "share a dtype"),
    (lambda q, k, v: (q, k.astype(np.float16), v), TypeError, "share a dtype"),
    (lambda q, k, v: (q[0], k, v), ValueError, "4 dimensions"),
    (lambda q, k, v: (q, k[:, :, :5], v), ValueError, "same shape"),
    (lambda q, k, v: (q[:, :3], k, v), ValueError, "multiple of kv_heads"),
    (lambda q, k, v: (q[..., :48], k[..., :48], v[..., :48]), ValueError, "supported"),
    (lambda q, k, v: (q[..., :0], k[..., :0], v[..., :0]), ValueError, "d = 0 is not supported"),
    (lambda q, k, v: (q.tolist(), k, v), TypeError, "numpy or cupy"),
])
def test_bad_input_is_a_clear_error(change, error, match):
    q, k, v = qkv(1, 4, 2, 3, 7, 64)
    with pytest.raises(error, match=match):
        att.attention(*change(q, k, v))
    with pytest.raises(TypeError, match="scale"):
        att.attention(q, k, v, scale="big")
