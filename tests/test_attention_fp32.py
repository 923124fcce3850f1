"""CPU tier: attention_13_fp32_pipelined's own CUDA source on the CPU emulator (cp.async copies landing
only at the wait, shared memory poisoned with NaN, warps interleaved at random, the launch in a child
process), judged against the float64 reference with the error rule of the tensor-core kernels'
emulated tests (at most twice the NumPy model's error plus two ulps, and close to the model; LSE
within 1e-5 relative; blind rows exactly 0 and -inf). Then broken copies of the kernel (a barrier or
the copy wait removed, the prefetch written into the stage being read, the mask or the zero fill
or the -inf guard dropped) must be rejected.
"""
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax.kernels.attention import fp32_pipelined as fp
from onlinesoftmax.runtime import emulator
from onlinesoftmax.runtime.loader import KERNELS_DIR

from test_attention_emulated import judge, make_qkv

pytestmark = pytest.mark.usefixtures("needs_emulator")   # tests/conftest.py
SOURCE = KERNELS_DIR / "attention" / f"{fp.NAME}.cu"

SHAPES = [   # (batch, heads, kv_heads, n_q, n_k, d, causal, q_scale)
    (1, 2, 1, 1, 1, 64, False, 1.0),
    (1, 2, 1, 70, 130, 64, True, 1.0),        # a partial query tile, a short last key tile
    (1, 2, 2, 300, 65, 64, True, 1.0),        # n_q > n_k: 235 rows see no key, a whole block sees none
    (1, 1, 1, 65, 200, 128, False, 1.0),      # four key tiles: each stage used twice
    (1, 4, 1, 33, 300, 128, True, 30.0),      # four query heads on one kv head, scores in the hundreds
]


def run(shape, source=None, seed=1):
    batch, heads, kv_heads, n_q, n_k, d, causal, q_scale = shape
    q, k, v = make_qkv(batch, heads, kv_heads, n_q, n_k, d, "float32", seed=n_q + n_k, q_scale=q_scale)
    out, lse = fp.emulate(q, k, v, causal, source=source, seed=seed)
    return out, lse, (q, k, v, causal)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:6])) + ("-causal" if s[6] else ""))
def test_the_kernel_source_on_the_emulator(shape):
    out, lse, (q, k, v, causal) = run(shape)
    assert judge(out, lse, q, k, v, causal, stem="attention_05_pipelined") is None


BROKEN = {   # name: (old, new) in the kernel's source
    "the top barrier removed": (
        "        __syncthreads();              // everyone's have; everyone is done with P V of tile t - 1\n", ""),
    "the barrier before P V removed": (
        "        __syncthreads();   // P complete before any thread multiplies it by V; every thread is done with K_t\n",
        ""),
    "the copy wait removed": (
        "        cp_async_wait_all_groups();   // this thread's copies of K_t and V_t (and Q) have landed\n", ""),
    "V_{t+1} written into the stage being read": (
        "copy_rows<F32_KEYS, D, D>(shared + L::V + ((t + 1) & 1) * F32_KEYS * D,",
        "copy_rows<F32_KEYS, D, D>(shared + L::V + (t & 1) * F32_KEYS * D,"),
    "K_{t+1} copied before the scores of tile t": (
        "        if (t + 1 < tiles)            // V_{t+1}",
        "        if (t + 1 < tiles) copy_rows<F32_KEYS, D, L::LD>(Ks, k_head, k0 + F32_KEYS, n_k);\n"
        "        if (t + 1 < tiles)            // V_{t+1}"),
    "the mask dropped": ("k0 + tx + 16 * j < limit ?", "true ?"),
    "the last copies not waited for": (
        "    cp_async_wait_all_groups();   // nothing in flight at exit (a block that sees no key never waited for Q)\n",
        ""),
    "no zero fill past n": ("inside ? head + (long long)(r0 + r) * D + col : head, inside)",
                            "head + (long long)(r0 + r) * D + col, true)"),
    "the -inf guard off": ("const float base = m_new == neg_inf() ? 0.0f : m_new;", "const float base = m_new;"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_kernel_is_rejected(name):
    old, new = BROKEN[name]
    text = SOURCE.read_text()
    assert old in text, old
    shape = (1, 2, 2, 300, 150, 64, True, 1.0)   # three key tiles, blind rows and a blind block, a partial tile
    try:
        out, lse, (q, k, v, causal) = run(shape, source=text.replace(old, new))
    except emulator.EmulatorFault:
        return
    assert judge(out, lse, q, k, v, causal, stem="attention_05_pipelined") is not None


def test_the_api_names_the_variant_and_its_limits():
    """By name through the API (NumPy in: the model), and its refusals, each naming what it takes."""
    q, k, v = make_qkv(1, 2, 1, 5, 9, 64, "float32", seed=2)
    out = osm.attention(q, k, v, causal=True, variant="fp32_pipelined")
    assert out.dtype == np.float32 and out.shape == q.shape
    with pytest.raises(TypeError, match="takes float32"):
        osm.attention(*(a.astype(np.float16) for a in (q, k, v)), variant="fp32_pipelined")
    q96 = np.zeros((1, 2, 3, 96), np.float32)
    with pytest.raises(ValueError, match="head dimension d in"):
        osm.attention(q96, q96, q96, variant="fp32_pipelined")
    with pytest.raises(ValueError, match="d in"):
        fp.emulate(q96, q96, q96)
    assert fp.shared_bytes(128) == 200704 and fp.shared_bytes(64) == 118784


def test_the_cost_model_reads_the_kernels_constants_and_orders_them():
    """warp_tile_costs counts with the tile sizes the .cu files define, and the page's claim holds:
    attention_13 needs fewer wavefronts per FMA than attention_01 at both head dimensions."""
    import re

    text = SOURCE.read_text()
    defined = {name: int(value) for name, value in re.findall(r"#define (F32_\w+) (\d+)", text)}
    assert (defined["F32_ROWS"], defined["F32_KEYS"], defined["F32_THREADS"]) == (fp.ROWS, fp.KEYS, fp.THREADS)
    blocked_text = (KERNELS_DIR / "attention" / "attention_01_blocked.cu").read_text()
    assert "#define BLOCK_Q 64" in blocked_text and "#define PAD 4" in blocked_text
    for d in fp.SUPPORTED_D:
        assert fp.shared_memory_cap(fp.NAME, d) > fp.shared_memory_cap("attention_01_blocked", d)
        costs = fp.warp_tile_costs(fp.NAME, d)
        assert costs["ffma"] == 2 * fp.ROWS * fp.KEYS * d // fp.THREADS   # 8 warps share the tile's FMAs
    with pytest.raises(ValueError, match="neither"):
        fp.warp_tile_costs("attention_03_mma", 128)


def test_unpadded_rows_would_collide():
    """The padding the kernel relies on: rows of d floats put a quarter-warp's 8 K rows in one chunk
    position (8 wavefronts), rows of d + 4 in eight (1)."""
    from onlinesoftmax.kernels.attention import mma_fragments as mf

    lanes = np.arange(8)
    for d in fp.SUPPORTED_D:
        assert mf.wavefronts(4 * lanes * d, 16) == 8
        assert mf.wavefronts(4 * lanes * (d + 4), 16) == 1
