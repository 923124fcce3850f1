"""CPU tier: the Hopper kernels' own CUDA source on the CPU emulator (attention_10_wgmma,
attention_11_wgmma_tma, attention_12_wgmma_overlap; wgmma computed from the PTX ISA's descriptor and
fragment rules at the wait, from shared memory and registers as they are then; tests/test_wgmma_layout.py
checks those rules, and tests/gpu/test_wgmma_gpu.py the hardware against them), judged as the other
tensor-core kernels are (tests/test_attention_emulated.py's rule: twice the model's error against
float64 plus two ulps; the kernel against its NumPy model; rows that see no key 0 and -inf).

Shapes: one query and one key, GQA with several query heads on a kv head, causal with rows that see
no key, two query tiles with a short last key tile, a key tile that some warpgroups skip, scores in
the hundreds. Broken copies are rejected:
- attention_10: K's descriptor one k-step off, V read K-major, the swizzle left out of the tile copy,
  the product used before its wait, the next tile copied into the stage being read, the proxy fence
  in place but the barrier gone;
- attention_11 (TMA copies by a producer warp, mbarriers, kernels/emulator/simt_tma.h): the producer
  refilling a stage before the consumers release it, the consumers reading a stage before it is full,
  a consumer that never releases its stage, too few bytes announced;
- attention_12 (the softmax overlapped with the previous tile's P V): O rescaled before that P V
  lands, P_j packed into P_{j-1}'s registers before it lands, S read before its wait, the last P V
  left out.
"""
import numpy as np
import pytest

from onlinesoftmax import attention_api
from onlinesoftmax.kernels.attention import wgmma as aw
from onlinesoftmax.runtime import emulator
from onlinesoftmax.runtime.loader import KERNELS_DIR
from test_attention_emulated import judge, make_qkv

pytestmark = pytest.mark.usefixtures("needs_emulator")   # tests/conftest.py

SOURCE = KERNELS_DIR / "attention" / "attention_10_wgmma.cu"
TMA_SOURCE = KERNELS_DIR / "attention" / f"{aw.TMA_NAME}.cu"
OVERLAP_SOURCE = KERNELS_DIR / "attention" / f"{aw.OVERLAP_NAME}.cu"
KERNELS = (aw.NAME, aw.TMA_NAME, aw.OVERLAP_NAME)
HEADER = KERNELS_DIR / "common" / "wgmma_attention.cuh"
TMA_HEADER = KERNELS_DIR / "common" / "tma_attention.cuh"

SHAPES = [   # (batch, heads, kv_heads, n_q, n_k, d, causal, dtype, q_scale)
    (1, 2, 1, 1, 1, 64, False, "bfloat16", 1.0),
    (1, 4, 2, 200, 65, 128, True, "float16", 1.0),        # n_q > n_k: 135 rows see no key
    (1, 2, 1, 130, 257, 64, False, "bfloat16", 1.0),      # two query tiles, three key tiles, the last short
    (1, 1, 1, 70, 300, 128, True, "bfloat16", 30.0),      # scores in the hundreds; causal skips by warpgroup
]


def run(shape, *, source=None, seed=1, name=aw.NAME):
    batch, heads, kv_heads, n_q, n_k, d, causal, dtype, q_scale = shape
    q, k, v = make_qkv(batch, heads, kv_heads, n_q, n_k, d, dtype, seed, q_scale)
    out, lse = aw.emulate(q, k, v, causal, name=name, source=source, seed=seed)
    return out, lse, (q, k, v, causal)


# attention_11 and 12 share attention_10's per-tile products and softmax: the shapes that exercise
# their own loops (one tile, rows that see no key, several tiles) suffice for them.
RUNS = [(shape, name) for name in KERNELS for shape in (SHAPES if name == aw.NAME else SHAPES[:3])]


@pytest.mark.parametrize("shape, name", RUNS, ids=str)
def test_the_kernel_source_on_the_emulator(shape, name):
    out, lse, (q, k, v, causal) = run(shape, name=name)
    verdict = judge(out, lse, q, k, v, causal, stem="attention_07_fragment_reuse")   # the rule's tolerance
    assert verdict is None, verdict
    model, _ = aw.simulate(q, k, v, causal)
    gap = np.abs(out.astype(np.float32) - model.astype(np.float32)).max()
    assert gap <= 2 * np.abs(model.astype(np.float32)).max() * (2 ** -10), gap   # its own model: rounding apart


def inline_header(source: str, header=HEADER) -> str:
    """The kernel's text with `header` pasted in its #include, so that a mutation of the header
    reaches the emulator's build."""
    return source.replace(f'#include "{header.name}"', header.read_text().replace("#pragma once", ""))


BROKEN = {   # name: (old, new) in the header
    "K's descriptor one k-step off": ("Ks + block * WG_KEYS * 64 + col, 0, 1024)", "Ks + block * WG_KEYS * 64 + (col ^ 16), 0, 1024)"),
    "V read K-major": ("wgmma_rs<T, D, 1>", "wgmma_rs<T, D, 0>"),
    "the tile copy without the swizzle": ("swizzled<64>(r, c % 64)", "r * 64 + c % 64"),
    "the scores used before their wait": ("    issue_scores<T, D>(s, Qs, Ks, group);\n    wgmma_wait<0>();\n",
                                          "    issue_scores<T, D>(s, Qs, Ks, group);\n"),
    "the next tile copied into the stage being read": ("Elem* next = stages + 2 * (stage ^ 1) * TILE;", "Elem* next = stages + 2 * stage * TILE;"),
    "the barrier gone": ("        fence_proxy_async();          // ... where the tensor cores will read them\n        __syncthreads();",
                         "        fence_proxy_async();"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_kernel_is_rejected(name):
    assert BROKEN[name][0] in HEADER.read_text(), BROKEN[name][0]
    assert rejected(inline_header(SOURCE.read_text()), *BROKEN[name], SHAPES[2], aw.NAME,
                    ("race", "past the dynamic size"))


BROKEN_TMA = {   # name: (old, new) in attention_11's source with tma_attention.cuh pasted in
    "the producer refilling a stage before it is released": (
        "if (j >= STAGES) mbarrier_wait(&b.empty[s], (j / STAGES - 1) & 1);", ""),
    "the consumers reading a stage before it is full": ("        mbarrier_wait(&b.full[s], (j / TMA_STAGES) & 1);", ""),
    "a consumer warpgroup that never releases its stage": (
        "        mbarrier_arrive(&b.empty[s]);", "        if (keys.group == 0) mbarrier_arrive(&b.empty[s]);"),
    "too few bytes announced": ("mbarrier_arrive_expect_tx(&b.full[s], 2 * b.TILE * 2);",
                                "mbarrier_arrive_expect_tx(&b.full[s], b.TILE * 2);"),
}


def rejected(text: str, old: str, new: str, shape, name: str, faults: tuple[str, ...]) -> bool:
    """The kernel `name` built from `text` with `old` replaced by `new` is stopped by the emulator with
    one of `faults` in the message, or gives an answer the rule rejects."""
    assert old in text, old
    try:
        out, lse, (q, k, v, causal) = run(shape, source=text.replace(old, new), name=name)
    except emulator.EmulatorFault as fault:
        assert any(f in str(fault) for f in faults), fault
        return True
    return judge(out, lse, q, k, v, causal, stem="attention_07_fragment_reuse") is not None


@pytest.mark.parametrize("name", list(BROKEN_TMA))
def test_a_broken_tma_kernel_is_rejected(name):
    shape = (1, 1, 1, 70, 600, 64, False, "bfloat16", 1.0)     # 5 key tiles: each stage used three times
    assert rejected(inline_header(TMA_SOURCE.read_text(), TMA_HEADER), *BROKEN_TMA[name], shape, aw.TMA_NAME,
                    ("deadlock", "unwritten"))


BROKEN_OVERLAP = {   # name: (old, new) in attention_12's source
    "O rescaled before the previous tile's P V lands": (
        "            wgmma_wait<0>();                                        // P V of tile j - 1 has landed\n"
        "            wgmma_fence_operands(flat<D / 2>(o));\n"
        "            mbarrier_arrive(&b.empty[previous]);\n"
        "            rescale_rows<D>(o, alpha);\n",
        "            rescale_rows<D>(o, alpha);\n"
        "            wgmma_wait<0>();                                        // P V of tile j - 1 has landed\n"
        "            wgmma_fence_operands(flat<D / 2>(o));\n"
        "            mbarrier_arrive(&b.empty[previous]);\n"),
    "the softmax reading S before it lands": (
        "            wgmma_wait<1>();                                        // S_j has landed; P V still runs\n", ""),
    "P V of the last tile left out": ("        issue_pv<T, D>(o, p, b.v(last));\n", ""),
    "P_j packed into P_{j-1}'s registers before its P V lands": (
        "            softmax_scores<WG_KEYS>(s, m, l, alpha, scale_log2, prescale, k0 + WG_KEYS > keys.unmasked_end, k0,\n"
        "                                    keys.limit);\n",
        "            softmax_scores<WG_KEYS>(s, m, l, alpha, scale_log2, prescale, k0 + WG_KEYS > keys.unmasked_end, k0,\n"
        "                                    keys.limit);\n"
        "            pack_p<T>(p, s);\n"),
}


@pytest.mark.parametrize("name", list(BROKEN_OVERLAP))
def test_a_broken_overlap_is_rejected(name):
    shape = (1, 1, 1, 70, 400, 64, False, "bfloat16", 1.0)     # 4 key tiles
    assert rejected(OVERLAP_SOURCE.read_text(), *BROKEN_OVERLAP[name], shape, aw.OVERLAP_NAME,
                    ("never waited", "changed between its issue and its wait"))


def test_the_api_names_the_variant_and_its_limits():
    q, k, v = make_qkv(1, 1, 1, 8, 8, 96, "bfloat16", 0)
    with pytest.raises(ValueError, match="head dimension d in"):
        attention_api.attention(q, k, v, variant="wgmma")
    q, k, v = make_qkv(1, 1, 1, 8, 8, 64, "bfloat16", 0)
    with pytest.raises(TypeError, match="takes float16 or bfloat16"):
        attention_api.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), variant="wgmma")
    out = attention_api.attention(q, k, v, variant="wgmma")       # NumPy input: the model
    np.testing.assert_array_equal(out, aw.simulate(q, k, v)[0])
