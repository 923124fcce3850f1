"""CPU tier for attention_09_varlen (prefill of packed sequences of different lengths): the NumPy model
and the kernel's own CUDA source on the CPU emulator against the float64 reference (error rule: at
most twice the model's error plus two ulps) over mixed lengths (empty query or key sequences, one
token, a sequence longer than a block, more queries than keys under causal), grouped heads, both
dtypes and head dimensions; the packed kernel against attention_07 on the same sequences padded to
one length; the judge shown failing on sequences that see each other, offsets off by one, a
top-left diagonal and an LSE in the wrong layout; the API's checks. Needs g++ for the emulated part."""

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import mma as am
from onlinesoftmax.kernels.attention import varlen


def judge(out, lse, q, k, v, cu_q, cu_k, causal):
    passed, message = varlen.compare(out, lse, q, k, v, cu_q, cu_k, causal)
    assert passed, message


# query lengths, key lengths, heads, kv_heads, d, dtype, causal
SHAPES = [((7, 130, 0, 3), (7, 130, 5, 200), 4, 2, 64, "bfloat16", True),    # an empty query sequence
          ((33, 1), (90, 0), 2, 2, 128, "float16", False),                   # a sequence without keys
          ((40, 5), (12, 5), 2, 1, 64, "float16", True),                      # more queries than keys: blind rows
          ((1, 1, 1), (300, 1, 17), 8, 2, 128, "bfloat16", True)]             # decoding-like rows


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_model_is_within_the_rule(shape):
    *lengths, heads, kv_heads, d, dtype, causal = shape
    q, k, v, cu_q, cu_k = varlen.example(*lengths, heads, kv_heads, d, dtype, seed=heads + d)
    judge(*varlen.simulate(q, k, v, cu_q, cu_k, causal=causal), q, k, v, cu_q, cu_k, causal)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernel_source_on_the_emulator(shape, needs_emulator):
    *lengths, heads, kv_heads, d, dtype, causal = shape
    q, k, v, cu_q, cu_k = varlen.example(*lengths, heads, kv_heads, d, dtype, seed=heads + d)
    judge(*varlen.emulate(q, k, v, cu_q, cu_k, causal, seed=3), q, k, v, cu_q, cu_k, causal)


def test_a_larger_grid_than_the_longest_sequence_changes_nothing(needs_emulator):
    """max_seqlen_q above the longest sequence: the extra blocks return before touching anything."""
    q, k, v, cu_q, cu_k = varlen.example((20, 3), (20, 9), 2, 2, 64, "bfloat16", seed=4)
    out, lse = varlen.emulate(q, k, v, cu_q, cu_k, True, max_seqlen_q=300, seed=5)
    judge(out, lse, q, k, v, cu_q, cu_k, True)


def test_packed_matches_attention_07_on_each_sequence(needs_emulator):
    """Two sequences of one length: packed, and as a (batch, heads, n, d) batch for attention_07."""
    n, heads, kv_heads, d = 70, 4, 2, 64
    q, k, v, cu_q, cu_k = varlen.example((n, n), (n, n), heads, kv_heads, d, "float16", seed=6)
    packed, _ = varlen.emulate(q, k, v, cu_q, cu_k, True, seed=7)
    batched = [a.reshape(2, n, a.shape[1], d).transpose(0, 2, 1, 3) for a in (q, k, v)]
    dense, _ = am.emulate(am.REUSE, *batched, causal=True, seed=7)
    assert np.array_equal(checks.as_float64(packed), checks.as_float64(dense.transpose(0, 2, 1, 3).reshape(q.shape)))


MUTANTS = [   # (text of attention_09_varlen.cu, replacement, what it breaks)
    ("kv_at = ((long long)k_start * kv_heads + kv_head) * D", "kv_at = ((long long)k_start * heads + kv_head) * D",
     "the keys' row stride of a grouped cache"),
    ("heads * D, kv_heads * D, n_q, n_k}", "heads * D, heads * D, n_q, n_k}", "the keys' stride taken as the queries'"),
    ("lse + (long long)head * total_q + q_first", "lse + (long long)head * total_q", "each sequence's LSE offset"),
]


@pytest.mark.parametrize("old, new, why", MUTANTS, ids=[m[2].replace(" ", "_") for m in MUTANTS])
def test_a_broken_kernel_is_rejected(old, new, why, needs_emulator):
    from onlinesoftmax.runtime import emulator

    source = varlen.VARLEN.path.read_text()
    assert old in source, "the mutant's text is gone from attention_09_varlen.cu: update MUTANTS"
    q, k, v, cu_q, cu_k = varlen.example((20, 140, 3), (30, 150, 3), 4, 2, 64, "bfloat16", seed=11)
    try:
        out, lse = varlen.emulate(q, k, v, cu_q, cu_k, True, seed=5, source=source.replace(old, new, 1))
    except emulator.EmulatorFault:                    # caught by the emulator (out of bounds, a race)
        return
    assert not varlen.compare(out, lse, q, k, v, cu_q, cu_k, True)[0], f"a kernel without {why} passed"


def test_the_judge_rejects_wrong_answers():
    q, k, v, cu_q, cu_k = varlen.example((30, 9, 50), (30, 40, 50), 4, 2, 64, "bfloat16", seed=8)
    causal = True
    whole = np.array([0, q.shape[0]], np.int32), np.array([0, k.shape[0]], np.int32)
    shifted = cu_k.copy()
    shifted[1:-1] += 1
    out, lse = varlen.simulate(q, k, v, cu_q, cu_k, causal=causal)
    unmasked = varlen.simulate(q, k, v, cu_q, cu_k, causal=False)
    wrong = {"the sequences see each other (one packed sequence)": varlen.simulate(q, k, v, *whole, causal=causal),
             "the key offsets off by one": varlen.simulate(q, k, v, cu_q, shifted, causal=causal),
             "no causal mask": unmasked,
             "the LSE as (total_q, heads)": (out, np.ascontiguousarray(lse.T).reshape(lse.shape)),
             "a sequence's outputs left zero": (np.where(np.arange(q.shape[0])[:, None, None] < 30, out, 0), lse)}
    for name, (o, l) in wrong.items():
        passed, _ = varlen.compare(o, l, q, k, v, cu_q, cu_k, causal)
        assert not passed, name
    judge(out, lse, q, k, v, cu_q, cu_k, causal)


def test_the_api_checks_its_arguments():
    q, k, v, cu_q, cu_k = varlen.example((5, 8), (6, 8), 4, 2, 64, "bfloat16", seed=9)
    out, lse = osm.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, return_lse=True)
    judge(out, lse, q, k, v, cu_q, cu_k, True)
    assert out.shape == q.shape and lse.shape == (4, 13) and lse.dtype == np.float32

    def call(**changed):
        return osm.attention(**({"q": q, "k": k, "v": v, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k} | changed))
    cases = [({"cu_seqlens_q": np.array([0, 5, 12])}, ValueError, r"cu_seqlens_q must start at 0.*end at 13.*ends at 12"),
             ({"cu_seqlens_k": np.array([1, 6, 14])}, ValueError, "starts at 1"),
             ({"cu_seqlens_k": np.array([0, 9, 6, 14])}, ValueError, "one length"),
             ({"cu_seqlens_q": np.array([0, 9, 5, 13]), "cu_seqlens_k": np.array([0, 6, 7, 14])}, ValueError,
              r"decreases at \[2\]"),
             ({"cu_seqlens_q": cu_q.astype(np.float32)}, ValueError, "must be integers"),
             ({"cu_seqlens_q": np.array([13])}, ValueError, "batch >= 1"),
             ({"cu_seqlens_k": None}, TypeError, "both cu_seqlens_q= and cu_seqlens_k="),
             ({"max_seqlen_q": 7}, ValueError, r"max_seqlen_q must be an integer >= the longest query sequence \(8\)"),
             ({"q": q[None]}, ValueError, r"q must be \(total_q, heads, d\)"),
             ({"q": q.astype(np.float32)}, TypeError, "float16 or bfloat16"),
             ({"q": q[:, :3]}, ValueError, "multiple of kv_heads"),
             ({"variant": "mma"}, ValueError, "variant 'auto' or 'varlen'"),
             ({"causal_align": "top_left"}, ValueError, "bottom-right"),
             ({"causal": "yes"}, TypeError, "causal must be True or False"),
             ({"page_table": cu_q}, TypeError, "no paged cache")]
    for changed, error, message in cases:
        with pytest.raises(error, match=message):
            call(**changed)
    assert call(max_seqlen_q=100).shape == q.shape


def test_torch_tensors_on_the_cpu_run_the_model():
    torch = pytest.importorskip("torch")
    q, k, v, cu_q, cu_k = varlen.example((5, 8), (6, 8), 2, 2, 64, "float16", seed=10)
    out = osm.attention(*(torch.from_numpy(a) for a in (q, k, v)), cu_seqlens_q=torch.from_numpy(cu_q),
                        cu_seqlens_k=torch.from_numpy(cu_k))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float16
    judge(out.numpy(), varlen.simulate(q, k, v, cu_q, cu_k)[1], q, k, v, cu_q, cu_k, False)
