"""CPU tier: the NumPy model of the tensor-core attention kernels (attention_mma.simulate) against
the float64 reference, what variant="auto" runs, and the errors for inputs those kernels do not
take. The kernels' own source runs on the CPU emulator in tests/test_attention_emulated.py."""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import attention_api, checks, registry
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.runtime import device


def qkv(batch, heads, kv_heads, n_q, n_k, d, dtype, seed=0, q_scale=1.0):
    rng = np.random.default_rng(seed)
    make = lambda *shape: checks.to_dtype(rng.standard_normal(shape).astype(np.float32), dtype)  # noqa: E731
    q = checks.to_dtype(np.asarray(make(batch, heads, n_q, d), np.float32) * np.float32(q_scale), dtype)
    return q, make(batch, kv_heads, n_k, d), make(batch, kv_heads, n_k, d)


def p_rounded_baseline(q, k, v, causal):
    """The same-dtype baseline a FlashAttention kernel is held to: the whole score matrix in float32,
    P rounded to the dtype before P V (as torch's FLASH backend does), the output rounded once."""
    q32, k32, v32 = (np.asarray(a, np.float32).astype(np.float64) for a in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k32, v32 = np.repeat(k32, group, axis=1), np.repeat(v32, group, axis=1)
    s = (q32 @ k32.swapaxes(-1, -2)) / np.sqrt(q.shape[-1])
    visible = np.arange(k.shape[2])[None, :] < am.key_limits(q.shape[2], k.shape[2], causal)[:, None]
    s = np.where(visible, s, -np.inf).astype(np.float32)
    with np.errstate(all="ignore"):
        m = s.max(-1, keepdims=True)
        p = np.exp(s - np.where(np.isfinite(m), m, 0)).astype(np.float32)
        l = p.sum(-1, keepdims=True)
        p16 = checks.to_dtype(p, q.dtype.name).astype(np.float64)
        out = np.where(l > 0, (p16 @ v32) / np.where(l > 0, l, 1), 0.0)
    return checks.to_dtype(out.astype(np.float32), q.dtype.name).astype(np.float64)


def errors(q, k, v, causal):
    out, lse = am.simulate(q, k, v, causal=causal)
    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
    base = p_rounded_baseline(q, k, v, causal)
    finite = np.isfinite(lse_ref)
    assert np.array_equal(np.isneginf(lse), ~finite), "blind rows: LSE -inf exactly there"
    assert (np.asarray(out, np.float64)[~finite] == 0).all(), "blind rows: output 0"
    lse_err = np.abs(lse[finite] - lse_ref[finite]).max(initial=0)
    assert lse_err <= 1e-5 * max(1.0, np.abs(lse_ref[finite]).max(initial=1))
    return float(np.abs(np.asarray(out, np.float64) - ref).max()), float(np.abs(base - ref).max()), ref


@pytest.mark.parametrize("dtype", am.DTYPES)
@pytest.mark.parametrize("n_q, n_k", [(1, 1), (1, 300), (33, 100), (100, 33), (129, 257), (257, 64), (300, 1000)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_model_matches_the_reference(dtype, n_q, n_k, causal):
    q, k, v = qkv(1, 4, 2, n_q, n_k, 64, dtype, seed=n_q * 31 + n_k)
    err, base, ref = errors(q, k, v, causal)
    assert err <= checks.tolerance(base, ref, dtype), (err, base)


@pytest.mark.parametrize("dtype", am.DTYPES)
def test_d128_grouped_heads_and_large_logits(dtype):
    q, k, v = qkv(2, 8, 2, 150, 333, 128, dtype, seed=7, q_scale=8.0)   # scores of a hundred and more
    err, base, ref = errors(q, k, v, causal=True)
    assert err <= checks.tolerance(base, ref, dtype), (err, base)


def test_the_check_rejects_a_model_without_the_rescale(monkeypatch):
    """The rule can fail: the same loop with alpha forced to 1 (O and l never rescaled) is rejected."""
    q, k, v = qkv(1, 2, 1, 70, 400, 64, "bfloat16", seed=9, q_scale=4.0)
    real_exp2 = np.exp2
    calls = []

    def exp2_without_rescale(x, *args, **kwargs):
        calls.append(1)
        result = real_exp2(x, *args, **kwargs)
        return np.ones_like(result) if len(calls) % 2 == 0 else result   # every second call is alpha
    monkeypatch.setattr(am.np, "exp2", exp2_without_rescale)
    out, _ = am.simulate(q, k, v, causal=False)
    monkeypatch.undo()
    ref, _ = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)))
    err = float(np.abs(np.asarray(out, np.float64) - ref).max())
    assert err > checks.tolerance(float(np.abs(p_rounded_baseline(q, k, v, False) - ref).max()), ref, "bfloat16")


@pytest.mark.parametrize("d", (64, 128))
def test_the_fragment_reuse_model_differs_only_by_its_tiles(d):
    """attention_07's model: 48-key tiles at d = 128 (64 at d = 64), the scaled score rounded before
    the max is subtracted, so the same numbers as the others' model at the same tiles. It passes the
    same error rule against the reference."""
    q, k, v = qkv(1, 2, 1, 150, 300, d, "bfloat16", seed=d, q_scale=3.0)
    ours, lse = am.simulate_reuse(q, k, v, causal=True)
    theirs, lse_05 = am.simulate(q, k, v, causal=True)
    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=True)
    gap = np.abs(np.asarray(ours, np.float64) - np.asarray(theirs, np.float64)).max()
    if am.REUSE_KEYS[d] == am.BLOCK_K:
        assert gap == 0
    else:
        assert 0 < gap <= 4 * checks.EPS["bfloat16"] * float(np.abs(ref).max())
    assert np.abs(lse - lse_05).max() <= 1e-5 * np.abs(lse_ref).max()
    err = float(np.abs(np.asarray(ours, np.float64) - ref).max())
    assert err <= checks.tolerance(float(np.abs(p_rounded_baseline(q, k, v, True) - ref).max()), ref, "bfloat16")
    same, _ = am.simulate(q, k, v, causal=True, scale=-0.1, block_k=am.REUSE_KEYS[d], fold=True)
    unfolded, _ = am.simulate(q, k, v, causal=True, scale=-0.1, block_k=am.REUSE_KEYS[d])
    np.testing.assert_array_equal(same.view(np.uint16), unfolded.view(np.uint16))   # scale <= 0: no fold


def test_the_model_equals_the_fp32_model_up_to_the_rounding_of_p():
    q, k, v = qkv(1, 2, 2, 64, 128, 64, "float16", seed=2)
    ours, _ = am.simulate(q, k, v)
    blocked, _ = ab.simulate(q, k, v)
    gap = np.abs(np.asarray(ours, np.float64) - np.asarray(blocked, np.float64)).max()
    assert 0 < gap <= 4 * checks.EPS["float16"]


@pytest.mark.parametrize("dtype, n_q, d, cc, expected", [
    ("bfloat16", 1000, 128, 90, "attention_11_wgmma_tma"),   # Hopper, d = 128: wgmma fed by TMA
    ("bfloat16", 1000, 64, 90, am.FASTEST.name),        # d = 64 on Hopper: not measured for wgmma yet
    ("float16", 1000, 128, 100, am.FASTEST.name),       # wgmma is sm_90a's only
    ("float16", 9, 64, 80, am.FASTEST.name),
    ("bfloat16", 8, 128, 90, ab.DECODE.name),          # decoding: the split kernel
    ("float32", 1000, 128, 90, "attention_13_fp32_pipelined"),   # fp32: CUDA cores fed by cp.async
    ("float32", 1000, 96, 90, ab.BLOCKED.name),        # a head dimension attention_13 lacks
    ("float32", 1000, 64, 75, ab.BLOCKED.name),        # no cp.async below 8.0
    ("bfloat16", 1000, 96, 90, ab.BLOCKED.name),       # a head dimension the tensor-core kernels lack
    ("bfloat16", 1000, 128, 75, ab.BLOCKED.name),      # no bf16 mma.sync below 8.0
])
def test_auto_picks(dtype, n_q, d, cc, expected):
    chosen = attention_api.choose(dtype, n_q, d, cc).variant
    assert chosen.name == expected
    assert chosen.min_cc <= cc and (chosen.max_cc is None or cc <= chosen.max_cc)


def test_auto_leaves_attention_13_where_its_tiles_do_not_fit():
    """attention_13 needs 196 KiB a block at d = 128 (116 KiB at 64): an A100 (163 KiB) runs it at d = 64
    only, an sm_86/89 GPU (99 KiB) not at all; asked by name there, it is refused with the bytes."""
    from onlinesoftmax.runtime import device

    with device.simulate_device(shared_memory_optin=166912):
        assert attention_api.choose("float32", 1000, 128, 80).variant.name == ab.BLOCKED.name
        assert attention_api.choose("float32", 1000, 64, 80).variant.name == "attention_13_fp32_pipelined"
    with device.simulate_device(shared_memory_optin=101376):
        assert attention_api.choose("float32", 1000, 64, 86).variant.name == ab.BLOCKED.name
        from onlinesoftmax.bench import attention as bench   # the prefill bench times only what can run
        assert [v.name for v in bench.prefill_variants(64)] == [ab.BLOCKED.name]
        with pytest.raises(RuntimeError, match="at d = 64 needs 118784 bytes"):
            attention_api._check_variant(attention_api.attention_fp32.PIPELINED, "float32", 64, on_gpu=True)


def test_auto_runs_the_tensor_core_model_for_16_bit_prefill():
    q, k, v = qkv(1, 2, 1, 40, 90, 64, "bfloat16", seed=5)
    with device.simulate_device(compute_capability=90):
        np.testing.assert_array_equal(osm.attention(q, k, v).view(np.uint16), am.FASTEST.simulate(q, k, v)[0].view(np.uint16))


@pytest.mark.parametrize("variant", [v.name for v in am.VARIANTS] + ["mma", "ldmatrix", "pipelined", "fragment_reuse"])
def test_tensor_core_variants_reject_what_they_do_not_take(variant):
    q, k, v = qkv(1, 2, 1, 20, 30, 64, "float32")
    with pytest.raises(TypeError, match="takes float16 or bfloat16, got float32"):
        osm.attention(q, k, v, variant=variant)
    q, k, v = qkv(1, 2, 1, 20, 30, 32, "bfloat16")
    with pytest.raises(ValueError, match=r"d in \(64, 128\), got d = 32"):
        osm.attention(q, k, v, variant=variant)
    q, k, v = qkv(1, 2, 1, 20, 30, 64, "bfloat16")
    out = osm.attention(q, k, v, variant=variant, causal=True)
    model = registry.resolve(variant, "attention").simulate
    np.testing.assert_array_equal(out.view(np.uint16), model(q, k, v, causal=True)[0].view(np.uint16))


def test_an_unknown_variant_lists_the_tensor_core_ones():
    q, k, v = qkv(1, 2, 1, 20, 30, 64, "bfloat16")
    with pytest.raises(ValueError, match="attention_05_pipelined"):
        osm.attention(q, k, v, variant="flash3")


def test_launch_geometry_and_shared_memory():
    assert am.grid(2, 16, 1000) == (8, 16, 2)
    assert am.shared_bytes("attention_03_mma", 128) == 32 * 1024
    assert am.shared_bytes("attention_05_pipelined", 128) == 64 * 1024
    assert am.shared_bytes("attention_05_pipelined", 64) == 32 * 1024
    assert am.shared_bytes(am.REUSE, 128) == (128 + 2 * 2 * 48) * 128 * 2 == 80 * 1024   # Q and two stages
    assert am.shared_bytes(am.REUSE, 64) == (128 + 2 * 2 * 64) * 64 * 2 == 48 * 1024
    assert am.threads(am.REUSE) == 128 and am.threads("attention_05_pipelined") == 256


def test_tile_counts():
    assert am.tile_counts(2, 3, 4096, 4096, False) == {"block_tiles": 2 * 3 * 32 * 64, "warp_tiles": 2 * 3 * 32 * 64 * 8}
    causal = am.tile_counts(1, 1, 4096, 4096, True)
    assert causal["warp_tiles"] < causal["block_tiles"] * 8 < 2 * 32 * 64 * 8 / 2 + 32 * 8 * 2
    # n_q > n_k: the first 135 rows see no key; five warps of the second query tile work, one of them on 2 tiles
    assert am.tile_counts(1, 1, 200, 65, True) == {"block_tiles": 2, "warp_tiles": 6}
