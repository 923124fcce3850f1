"""GPU tier for attention_09_varlen (prefill of packed sequences): the kernel against the float64
reference (at most twice its NumPy model's error plus two ulps) over mixed lengths (empty, one token,
several blocks, more queries than keys), grouped heads, both dtypes and head dimensions, causal and
not; against attention_07 on the same sequences padded into a batch; one plan for every batch under
a given max_seqlen_q; outputs poisoned first; two threads on two streams; torch tensors on torch's
stream; bad offsets refused before any launch, the context left healthy."""
import threading

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import varlen
from onlinesoftmax.runtime import plan

pytestmark = pytest.mark.gpu


def run(q, k, v, cu_q, cu_k, causal=False, **options):
    out, lse = osm.attention(*map(cp.asarray, (q, k, v)), cu_seqlens_q=cp.asarray(cu_q), cu_seqlens_k=cp.asarray(cu_k),
                             causal=causal, return_lse=True, **options)
    return checks.host(out), cp.asnumpy(lse)


def judge(out, lse, q, k, v, cu_q, cu_k, causal):
    passed, message = varlen.compare(out, lse, q, k, v, cu_q, cu_k, causal)
    assert passed, message


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("d", (64, 128))
@pytest.mark.parametrize("causal", (False, True))
@pytest.mark.parametrize("heads, kv_heads", ((8, 8), (16, 2)))
def test_mixed_lengths(dtype, d, causal, heads, kv_heads):
    q_lengths = (1, 0, 700, 129, 33, 1000, 5)
    k_lengths = (1, 4, 700, 300, 0, 1000, 2)       # 5 queries over 2 keys: blind rows under causal
    q, k, v, cu_q, cu_k = varlen.example(q_lengths, k_lengths, heads, kv_heads, d, dtype, seed=d + heads)
    judge(*run(q, k, v, cu_q, cu_k, causal), q, k, v, cu_q, cu_k, causal)


def test_packed_matches_the_dense_kernel_on_equal_lengths():
    """At d = 64 both take key tiles of 64: the same sums in the same order, the same bits."""
    n, heads, kv_heads, d = 1000, 16, 4, 64
    q, k, v, cu_q, cu_k = varlen.example((n,) * 3, (n,) * 3, heads, kv_heads, d, "bfloat16", seed=3)
    packed, _ = run(q, k, v, cu_q, cu_k, True)
    batched = [cp.asarray(a.reshape(3, n, a.shape[1], d).transpose(0, 2, 1, 3).copy()) for a in (q, k, v)]
    dense = checks.host(osm.attention(*batched, causal=True, variant="fragment_reuse"))
    assert np.array_equal(checks.as_float64(packed),
                          checks.as_float64(dense.transpose(0, 2, 1, 3).reshape(q.shape)))


def test_one_plan_for_every_batch_under_max_seqlen_q():
    """Batches of 900 tokens cut into 4 sequences at random places: one plan for all of them."""
    rng = np.random.default_rng(5)
    cached = None
    for step in range(6):
        cuts = np.sort(rng.choice(np.arange(1, 900), size=3, replace=False))
        lengths = np.diff(np.concatenate([[0], cuts, [900]]))
        q, k, v, cu_q, cu_k = varlen.example(lengths, lengths, 8, 2, 64, "float16", seed=step)
        judge(*run(q, k, v, cu_q, cu_k, True, max_seqlen_q=900), q, k, v, cu_q, cu_k, True)
        if cached is None:
            cached = plan.cached_runners()
        assert plan.cached_runners() == cached, "a batch of the same shapes built a new plan"


def test_poisoned_outputs_are_all_written():
    q, k, v, cu_q, cu_k = varlen.example((300, 1, 77), (2, 50, 77), 8, 4, 128, "float16", seed=6)
    out = osm.attention(*map(cp.asarray, (q, k, v)), cu_seqlens_q=cp.asarray(cu_q), cu_seqlens_k=cp.asarray(cu_k),
                        causal=True)
    assert not bool(cp.isnan(out).any())
    judge(checks.host(out), varlen.simulate(q, k, v, cu_q, cu_k, causal=True)[1], q, k, v, cu_q, cu_k, True)


def test_two_threads_on_two_streams():
    cases = [varlen.example((500, 3, 900), (700, 3, 900), 16, 4, 128, "bfloat16", seed=s) for s in (1, 2)]
    alone = [run(*c, True) for c in cases]
    got = [None, None]

    def work(i):
        with cp.cuda.Stream(non_blocking=True) as stream:
            for _ in range(10):
                result = run(*cases[i], True)
            stream.synchronize()
            got[i] = result
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(2):
        assert np.array_equal(checks.as_float64(got[i][0]), checks.as_float64(alone[i][0]))


def test_torch_tensors_on_torchs_stream():
    torch = pytest.importorskip("torch")
    q, k, v, cu_q, cu_k = varlen.example((900, 17), (900, 40), 8, 2, 64, "bfloat16", seed=4)
    t = lambda a: torch.as_tensor(checks.as_float64(a), device="cuda").to(torch.bfloat16)   # noqa: E731
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out, lse = osm.attention(t(q), t(k), t(v), cu_seqlens_q=torch.as_tensor(cu_q, device="cuda"),
                                 cu_seqlens_k=torch.as_tensor(cu_k, device="cuda"), causal=True, return_lse=True)
    side.synchronize()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and lse.shape == (8, 917)
    judge(out.float().cpu().numpy().astype(np.float32), lse.cpu().numpy(), q, k, v, cu_q, cu_k, True)


def test_bad_offsets_leave_the_context_healthy():
    q, k, v, cu_q, cu_k = varlen.example((40, 7), (40, 7), 8, 2, 64, "bfloat16", seed=7)
    with pytest.raises(ValueError, match="must start at 0, never decrease and end at 47"):
        run(q, k, v, np.array([0, 40, 10**6], np.int32), cu_k)
    with pytest.raises(ValueError, match="decreases"):
        run(q, k, v, cu_q, np.array([0, 50, 47], np.int32))
    judge(*run(q, k, v, cu_q, cu_k), q, k, v, cu_q, cu_k, False)
