"""CPU tier for attention_backward_02_mma (the gradients of attention on tensor cores): its NumPy model
and the kernel's own CUDA source on the CPU emulator against the float64 gradients (at most twice the
model's error plus two ulps of the gradient's scale) over odd lengths, n_q != n_k, grouped heads,
causal with queries that see no key, a key block past n_k, both dtypes and head dimensions; broken
copies of the kernel (no causal mask, D left out, dS^T read for dq without its transpose, the tile's
LSE of rows past n_q not neutralised) shown failing; the choice of variant in the API."""

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import backward_blocked as bb
from onlinesoftmax.kernels.attention import backward_mma as bm
from onlinesoftmax.kernels.attention import backward_pipelined as bp
from onlinesoftmax.kernels.attention import backward_wgmma as bw
from test_attention_backward import make


def problems(grads, dout, q, k, v, out, lse, causal) -> list[str]:
    """What is wrong with (dq, dk, dv): NaN, or an error past checks.tolerance of the model's error."""
    refs = bb.reference(dout, q, k, v, causal)
    model = bm.simulate(dout, q, k, v, out, lse, causal)
    found = []
    for name, got, ref, mod in zip(("dq", "dk", "dv"), grads, refs, model):
        y = checks.as_float64(got)
        if np.isnan(y).any():
            found.append(f"{name}: NaN")
            continue
        model_err = float(np.abs(checks.as_float64(mod) - ref).max())
        err = float(np.abs(y - ref).max())
        if err > checks.tolerance(model_err, ref, q.dtype.name):
            found.append(f"{name}: error {err:.3g}, the model's {model_err:.3g}")
    return found


# batch, heads, kv_heads, n_q, n_k, d, dtype, causal
SHAPES = [(1, 2, 1, 37, 45, 64, "bfloat16", False),
          (1, 2, 2, 70, 33, 64, "float16", True),          # n_q > n_k causal: queries that see no key
          (1, 1, 1, 65, 130, 128, "bfloat16", True),       # a key block past n_k, query tiles of 64 and 1
          (2, 4, 2, 1, 1, 128, "float16", False)]          # one query, one key, grouped heads


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_model_is_within_the_rule(shape):
    *dims, dtype, causal = shape
    args = make(*dims, dtype, causal, seed=sum(dims))
    refs = bb.reference(*args[:4], causal)
    for got, ref in zip(bm.simulate(*args, causal), refs):
        assert float(np.abs(checks.as_float64(got) - ref).max()) <= 8 * checks.EPS[dtype] * max(1, float(np.abs(ref).max()))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernel_source_on_the_emulator(shape, needs_emulator):
    *dims, dtype, causal = shape
    args = make(*dims, dtype, causal, seed=sum(dims))
    assert problems(bm.emulate(*args, causal, seed=3), *args, causal) == []


MUTANTS = [   # (text of attention_backward_02_mma.cu, replacement, what it breaks)
    ("(causal && key > query + n_k - n_q)", "false", "the causal mask of the recomputed P"),
    ("(dp[j][e] - tiles.delta[8 * j + 2 * t + (e & 1)])", "dp[j][e]", "D left out of dS"),
    ("ldmatrix_x4_trans(a, tiles.ds + ds_lane", "ldmatrix_x4(a, tiles.ds + ds_lane", "dS^T read for dq untransposed"),
    ("l == neg_inf() ? -neg_inf() : l * BWD2_LOG2E", "l * BWD2_LOG2E", "rows without keys and past n_q"),
    ("T::pack(dk_acc[n][2 * half] * scale, dk_acc[n][2 * half + 1] * scale)",
     "T::pack(dk_acc[n][2 * half], dk_acc[n][2 * half + 1])", "dk without its scale"),
]


def assert_rejected(module, variant, old, new, why, args):
    """The kernel of `variant` with `old` replaced by `new`, run by module.emulate on causal args: a fault
    or a problem found, never a pass."""
    from onlinesoftmax.runtime import emulator

    source = variant.path.read_text()
    assert old in source, f"the mutant's text is gone from {variant.file}: update its list of mutants"
    try:
        grads = module.emulate(*args, True, seed=5, source=source.replace(old, new, 1))
    except emulator.EmulatorFault:
        return
    assert problems(grads, *args, True), f"a broken kernel ({why}) passed"


@pytest.mark.parametrize("old, new, why", MUTANTS, ids=[m[2].replace(" ", "_") for m in MUTANTS])
def test_a_broken_kernel_is_rejected(old, new, why, needs_emulator):
    args = make(1, 2, 1, 70, 40, 64, "bfloat16", True, seed=6)        # causal, blind rows, partial tiles
    assert_rejected(bm, bm.BACKWARD_MMA, old, new, why, args)


def test_the_api_chooses_tensor_cores_for_16_bit_inputs():
    args = make(1, 2, 1, 9, 12, 64, "bfloat16", True, seed=7)
    auto = osm.attention_backward(*args, causal=True)
    assert all(np.array_equal(checks.as_float64(a), checks.as_float64(b))
               for a, b in zip(auto, bm.simulate(*args, True)))
    blocked = osm.attention_backward(*args, causal=True, variant="blocked")
    assert all(np.array_equal(checks.as_float64(a), checks.as_float64(b))
               for a, b in zip(blocked, bb.simulate(*args, True)))
    assert problems(auto, *args, True) == [] and problems(blocked, *args, True) == []
    with pytest.raises(ValueError, match="variant 'mma' takes float16 or bfloat16 and deterministic=False"):
        osm.attention_backward(*args, variant="mma", deterministic=True)
    with pytest.raises(ValueError, match="variant 'mma' takes"):
        osm.attention_backward(*make(1, 1, 1, 3, 3, 64, "float32", False), variant="mma")
    with pytest.raises(ValueError, match="variant must be 'auto', 'mma', 'pipelined', 'wgmma' or 'blocked'"):
        osm.attention_backward(*args, variant="fast")


# attention_backward_03_pipelined: the same arithmetic and model, 128 keys a block, Q and dO double-buffered
# across query tiles and the group's heads, dq split over the warps by column halves.
PIPELINED_SHAPES = SHAPES[:2] + [(1, 2, 1, 130, 140, 64, "bfloat16", True),   # 3 tiles a head, two heads, 2 key blocks
                                 (1, 1, 1, 70, 130, 128, "float16", False)]


PIPELINED_MUTANTS = [
    ("if (more) load_tile(buffer ^ 1, next_base, next_q0);", "if (more) load_tile(buffer, next_base, next_q0);",
     "the next tile copied over the one being computed"),
    ("if (more) store_row_terms(buffer ^ 1);", "if (more) store_row_terms(buffer);",
     "the next tile's LSE and D stored in this tile's slots"),
    ("dq_half * (D / 2) + 2 * t", "2 * t", "both warps of a row group adding to the first column half"),
    ("(causal && k0 + BWD3_KEYS - 1 > q0 + n_k - n_q)", "(causal && k0 + 63 > q0 + n_k - n_q)",
     "02's block width in the causal test"),
]


@pytest.mark.parametrize("old, new, why", PIPELINED_MUTANTS, ids=[m[2].replace(" ", "_") for m in PIPELINED_MUTANTS])
def test_a_broken_pipelined_kernel_is_rejected(old, new, why, needs_emulator):
    args = make(1, 2, 1, 130, 140, 64, "bfloat16", True, seed=8)   # tiles across heads, a partial key block
    assert_rejected(bp, bp.BACKWARD_PIPELINED, old, new, why, args)


def test_the_api_runs_the_pipelined_kernel_by_name():
    args = make(1, 2, 1, 9, 12, 64, "bfloat16", True, seed=7)
    got = osm.attention_backward(*args, causal=True, variant="pipelined")
    assert all(np.array_equal(checks.as_float64(a), checks.as_float64(b))
               for a, b in zip(got, bp.simulate(*args, True)))
    with pytest.raises(ValueError, match="variant 'pipelined' takes float16 or bfloat16"):
        osm.attention_backward(*make(1, 1, 1, 3, 3, 64, "float32", False), variant="pipelined")
    from onlinesoftmax.runtime import device

    wide = make(1, 2, 1, 9, 12, 128, "bfloat16", True, seed=7)
    with device.simulate_device(shared_memory_optin=101376):   # sm_86 / sm_89: 99 KiB a block
        with pytest.raises(RuntimeError, match="variant 'pipelined' at d = 128 needs 148480 bytes"):
            osm.attention_backward(*wide, causal=True, variant="pipelined")
        osm.attention_backward(*args, causal=True, variant="pipelined")    # d = 64: 82 KiB fits
        osm.attention_backward(*wide, causal=True)                          # auto: attention_backward_02_mma


# attention_backward_04_wgmma: 03's block with every product a warpgroup instruction (64 keys a
# warpgroup), dS stored [query][key] for dQ = dS K; at d = 64 each warpgroup adds its own keys' dQ.
WGMMA_SHAPES = PIPELINED_SHAPES + [(1, 2, 1, 130, 140, 128, "bfloat16", True),   # d = 128: dQ split by columns
                                   (2, 4, 2, 1, 1, 128, "float16", False)]


@pytest.mark.parametrize("module, shape", [(bp, s) for s in PIPELINED_SHAPES] + [(bw, s) for s in WGMMA_SHAPES],
                         ids=lambda x: x.NAME if hasattr(x, "NAME") else str(x))
def test_the_128_key_kernels_on_the_emulator(module, shape, needs_emulator):
    """attention_backward_03_pipelined and 04_wgmma, each from its own source."""
    *dims, dtype, causal = shape
    args = make(*dims, dtype, causal, seed=sum(dims))
    assert problems(module.emulate(*args, causal, seed=4), *args, causal) == []


WGMMA_MUTANTS = [   # (text, replacement, what it breaks, d)
    ("wgmma_ss<T, 64, 1>(flat<32>(dq)", "wgmma_ss<T, 64, 0>(flat<32>(dq)", "K read K-major for dQ", 64),
    ("ds_block[swizzled<64>(column, row16 + g + 8 * (e >> 1))]", "ds_block[swizzled<64>(row16 + g + 8 * (e >> 1), column)]",
     "dS stored untransposed", 64),
    ("dq_step0 = D == 128 ? 0 : 4 * group", "dq_step0 = 0", "both warpgroups' dQ over the first 64 keys", 64),
    ("dq_block = D == 128 ? group : 0", "dq_block = 0", "both warpgroups' dQ into the first 64 columns", 128),
    ("        wgmma_wait<1>();   // S^T has landed (dP^T may not have)\n", "", "the scores used before their wait", 64),
    ("        wgmma_wait<1>();   // dP^T has landed (dV may not have)\n", "", "dP^T used before its wait", 64),
    ("        fence_proxy_async();   // this thread's dS stores, for the tensor cores\n        __syncthreads();",
     "        fence_proxy_async();   // this thread's dS stores, for the tensor cores\n", "dQ before dS is whole", 64),
    ("if (more) load_tile(buffer ^ 1, next_base, next_q0);", "if (more) load_tile(buffer, next_base, next_q0);",
     "the next tile copied over the one being computed", 64),
    ("        dq_acc[row * d + i] = 0.0f;\n", "", "dq's fp32 buffer left as it was (poisoned)", 64),
]


@pytest.mark.parametrize("old, new, why, d", WGMMA_MUTANTS, ids=[m[2].replace(" ", "_") for m in WGMMA_MUTANTS])
def test_a_broken_wgmma_kernel_is_rejected(old, new, why, d, needs_emulator):
    args = make(1, 2, 1, 130, 140, d, "bfloat16", True, seed=8)   # tiles across heads, a partial key block
    assert_rejected(bw, bw.BACKWARD_WGMMA, old, new, why, args)


def test_the_api_runs_the_wgmma_kernel_by_name():
    args = make(1, 2, 1, 9, 12, 64, "bfloat16", True, seed=7)
    got = osm.attention_backward(*args, causal=True, variant="wgmma")
    assert all(np.array_equal(checks.as_float64(a), checks.as_float64(b))
               for a, b in zip(got, bw.simulate(*args, True)))
    with pytest.raises(ValueError, match="variant 'wgmma' takes float16 or bfloat16"):
        osm.attention_backward(*make(1, 1, 1, 3, 3, 64, "float32", False), variant="wgmma")
