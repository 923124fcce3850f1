"""GPU tier for attention_08_paged_decode: the kernel against the float64 reference (at most twice its
NumPy model's error plus two ulps) over mixed lengths, page sizes 1, 16, 48 and 256, grouped heads and
both dtypes; against the contiguous decode kernel on the same keys; a decode loop that appends a
token a step to its pages and reuses one plan; two threads on two streams; torch tensors on torch's
stream; bad pages and lengths, and a pool off a 16-byte boundary, refused before any launch, the context left healthy; unchecked calls
with wrong entries: NaN rows, nothing read outside the arrays."""
import threading

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import decode_mma as dm
from onlinesoftmax.kernels.attention import paged
from onlinesoftmax.runtime import plan

pytestmark = pytest.mark.gpu


def make_paged(batch, heads, kv_heads, n_q, lengths, d, page_size, dtype, seed, spare=3):
    return paged.example(batch, heads, kv_heads, n_q, lengths, d, page_size, dtype, seed, spare)


def run(q, kp, vp, table, lengths, causal=False):
    out, lse = osm.attention(*(cp.asarray(q),), kv_cache=(cp.asarray(kp), cp.asarray(vp)), page_table=cp.asarray(table),
                             cache_lengths=cp.asarray(lengths), causal=causal, return_lse=True)
    return checks.host(out), cp.asnumpy(lse)


def judge(out, lse, q, kp, vp, table, lengths, causal):
    passed, message = paged.compare(out, lse, q, kp, vp, table, lengths, causal)
    assert passed, message


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("d", (64, 128))
@pytest.mark.parametrize("page_size", (1, 16, 48, 256))
@pytest.mark.parametrize("heads, kv_heads", ((32, 8), (8, 8), (16, 2)))
def test_mixed_lengths_page_sizes_and_groups(dtype, d, page_size, heads, kv_heads):
    lengths = (1, 0, 4097, 700, 12000, 33, 256, 2) if page_size > 1 else (1, 0, 1500, 33)
    q, kp, vp, table, lengths = make_paged(len(lengths), heads, kv_heads, 1, lengths, d, page_size, dtype,
                                           seed=page_size + d)
    judge(*run(q, kp, vp, table, lengths), q, kp, vp, table, lengths, False)


@pytest.mark.parametrize("n_q", (2, 5))
def test_several_queries_causal_per_sequence(n_q):
    q, kp, vp, table, lengths = make_paged(3, 16, 4, n_q, (3, 1000, 2), 128, 16, "bfloat16", seed=n_q)
    judge(*run(q, kp, vp, table, lengths, causal=True), q, kp, vp, table, lengths, True)


def test_paged_matches_contiguous_decode():
    batch, heads, kv_heads, n, d = 8, 32, 8, 5000, 128
    q, kp, vp, table, lengths = make_paged(batch, heads, kv_heads, 1, (n,) * batch, d, 16, "bfloat16", seed=3)
    k = np.stack([paged.gather(kp, vp, table, lengths, b)[0] for b in range(batch)])
    v = np.stack([paged.gather(kp, vp, table, lengths, b)[1] for b in range(batch)])
    k, v = checks.to_dtype(k, "bfloat16"), checks.to_dtype(v, "bfloat16")
    contiguous = checks.as_float64(checks.host(osm.attention(cp.asarray(q), cp.asarray(k), cp.asarray(v),
                                                             variant="decode_mma")))
    pages = checks.as_float64(run(q, kp, vp, table, lengths)[0])
    ref, _ = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)))
    model_err = float(np.abs(checks.as_float64(dm.simulate(q, k, v)[0]) - ref).max())
    assert float(np.abs(pages - contiguous).max()) <= 2 * model_err + 2 * checks.EPS["bfloat16"]


def test_a_decode_loop_appends_to_its_pages_and_reuses_one_plan():
    batch, heads, kv_heads, d, page_size, steps = 4, 16, 4, 128, 16, 40
    prompt = np.array([5, 100, 31, 0], np.int32)
    q, kp, vp, table, _ = make_paged(batch, heads, kv_heads, 1, tuple(prompt + steps), d, page_size, "bfloat16", seed=11)
    pools = cp.asarray(kp), cp.asarray(vp)
    table_d, lengths = cp.asarray(table), cp.asarray(prompt)
    rng = np.random.default_rng(12)
    cached = None
    for step in range(steps):
        slot = cp.asnumpy(lengths)                              # each sequence's next key goes to its next slot
        for b in range(batch):
            page, offset = table[b, slot[b] // page_size], slot[b] % page_size
            for pool in pools:
                pool[page, offset] = cp.asarray(checks.to_dtype(rng.standard_normal((kv_heads, d)).astype(np.float32),
                                                                "bfloat16"))
        lengths += 1
        q_step = checks.to_dtype(rng.standard_normal((batch, heads, 1, d)).astype(np.float32), "bfloat16")
        out, lse = osm.attention(cp.asarray(q_step), kv_cache=pools, page_table=table_d, cache_lengths=lengths,
                                 return_lse=True)
        if step == 0:
            cached = plan.cached_runners()
        assert plan.cached_runners() == cached, "a step built a new plan"
        if step % 13 == 0 or step == steps - 1:
            judge(checks.host(out), cp.asnumpy(lse), q_step, checks.host(pools[0]), checks.host(pools[1]), table,
                  cp.asnumpy(lengths), False)


def test_two_threads_on_two_streams():
    cases = [make_paged(4, 32, 8, 1, (3000, 10, 7000, 1), 128, 16, "bfloat16", seed=s) for s in (1, 2)]
    alone = [run(*c) for c in cases]
    got = [None, None]

    def work(i):
        with cp.cuda.Stream(non_blocking=True) as stream:
            for _ in range(10):
                result = run(*cases[i])
            stream.synchronize()
            got[i] = result
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(2):
        assert np.array_equal(checks.as_float64(got[i][0]), checks.as_float64(alone[i][0]))


def test_torch_tensors_on_torchs_stream():
    torch = pytest.importorskip("torch")
    q, kp, vp, table, lengths = make_paged(2, 8, 2, 1, (900, 17), 64, 16, "bfloat16", seed=4)
    t = lambda a: torch.as_tensor(checks.as_float64(a), device="cuda").to(torch.bfloat16)   # noqa: E731
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = osm.attention(t(q), kv_cache=(t(kp), t(vp)), page_table=torch.as_tensor(table, device="cuda"),
                            cache_lengths=torch.as_tensor(lengths, device="cuda"))
    side.synchronize()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    ref, _ = paged.reference(q, kp, vp, table, lengths)
    assert float((out.float().cpu().numpy() - ref).__abs__().max()) <= 4 * checks.EPS["bfloat16"] * float(abs(ref).max())


@pytest.mark.parametrize("dtype", ("int32", "int64", "uint8"))
def test_the_check_kernel_finds_what_the_numpy_lines_find(dtype, seed=23):
    """first_bad_entry's CuPy kernel against its NumPy lines (the CPU tier holds those against a
    loop): planted wrong pages and lengths, tables sliced (not contiguous) and whole."""
    from onlinesoftmax.attention_paged import first_bad_entry

    rng = np.random.default_rng(seed)
    for _ in range(100):
        batch, per_seq, page_size, pages = (int(rng.integers(1, 6)), int(rng.integers(0, 7)),
                                            int(rng.integers(1, 5)), int(rng.integers(1, 9)))
        wide = rng.integers(0, pages, (batch, 2 * per_seq)).astype(dtype)
        if per_seq:
            wide[rng.integers(batch), rng.integers(2 * per_seq)] = 200
        lengths = rng.integers(0, per_seq * page_size + 1, batch)
        if rng.random() < 0.3:
            lengths[rng.integers(batch)] = rng.choice([-1, per_seq * page_size + 1])
        on_gpu = cp.asarray(wide)
        for columns in (np.s_[:, ::2], np.s_[:, :per_seq]):       # neither is contiguous; each also copied
            want = first_bad_entry(np.ascontiguousarray(wide[columns]), lengths, pages, page_size)
            assert first_bad_entry(on_gpu[columns], cp.asarray(lengths), pages, page_size) == want
            assert first_bad_entry(cp.ascontiguousarray(on_gpu[columns]), cp.asarray(lengths), pages, page_size) == want


def test_bad_pages_and_lengths_leave_the_context_healthy():
    q, kp, vp, table, lengths = make_paged(2, 8, 2, 1, (40, 7), 64, 16, "bfloat16", seed=7)
    table[0, 1] = 10**6
    with pytest.raises(ValueError, match=r"page_table\[0, 1\] = 1000000 is not a page"):
        run(q, kp, vp, table, lengths)
    table[0, 1] = 0
    with pytest.raises(ValueError, match="outside"):
        run(q, kp, vp, table, np.array([40, 10**5], np.int32))
    judge(*run(q, kp, vp, table, lengths), q, kp, vp, table, lengths, False)


def test_a_pool_off_a_16_byte_boundary_is_refused_and_the_context_stays_healthy():
    q, kp, vp, table, lengths = make_paged(2, 8, 2, 1, (40, 7), 64, 16, "bfloat16", seed=7)
    bits = cp.asarray(kp).view(cp.uint16).ravel()
    words = cp.zeros(bits.size + 1, cp.uint16)                # the pool's bits, one element (2 bytes) in
    words[1:] = bits
    shifted = words[1:].view(cp.asarray(kp).dtype).reshape(kp.shape)
    assert shifted.flags.c_contiguous and shifted.data.ptr % 16 == 2
    with pytest.raises(ValueError, match="16-byte boundary .* k_pages 2 bytes past one"):
        osm.attention(cp.asarray(q), kv_cache=(shifted, cp.asarray(vp)), page_table=cp.asarray(table),
                      cache_lengths=cp.asarray(lengths))
    judge(*run(q, kp, vp, table, lengths), q, kp, vp, table, lengths, False)


def test_unchecked_calls_give_nan_rows_for_wrong_entries_and_stay_healthy():
    """check_cache=False: no host check and no synchronization; a page number far outside the pool,
    a negative one and a length past the table turn exactly their sequences to NaN (outputs and LSE)
    with nothing read outside the arrays (the context stays healthy: the checked call after it is
    right), the other sequences right; torch tensors take the keyword too."""
    q, kp, vp, table, lengths = make_paged(4, 8, 2, 1, (40, 7, 300, 64), 64, 16, "float16", seed=12)
    table[0, 1], table[2, 5] = 10**6, -7
    lengths[3] = table.shape[1] * 16 + 1
    wrong = paged.wrong_sequences(table, lengths, kp.shape[0], 16)
    assert list(np.flatnonzero(wrong)) == [0, 2, 3]
    out, lse = osm.attention(cp.asarray(q), kv_cache=(cp.asarray(kp), cp.asarray(vp)), page_table=cp.asarray(table),
                             cache_lengths=cp.asarray(lengths), return_lse=True, check_cache=False)
    out, lse = checks.host(out), cp.asnumpy(lse)
    for b in range(4):
        assert np.isnan(checks.as_float64(out[b])).all() == np.isnan(lse[b]).all() == bool(wrong[b]), b
    judge(out[1:2], lse[1:2], q[1:2], kp, vp, table[1:2], lengths[1:2], False)
    wide_table, wide_lengths = cp.asarray(table, cp.int64), cp.asarray(lengths, cp.int64)
    wide_table[0, 1], wide_lengths[3] = 2**32 + 1, 2**32 + 5          # would wrap to page 1 and 5 keys
    wide_table[2, 5] = 0
    _, lse = osm.attention(cp.asarray(q), kv_cache=(cp.asarray(kp), cp.asarray(vp)), page_table=wide_table,
                           cache_lengths=wide_lengths, return_lse=True, check_cache=False)
    assert [bool(cp.isnan(lse[b]).all()) for b in range(4)] == [True, False, False, True]
    fine = make_paged(2, 8, 2, 1, (40, 7), 64, 16, "bfloat16", seed=7)
    judge(*run(*fine), *fine, False)
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        tq, tk, tv, tt, tn = (torch.as_tensor(cp.asarray(a)) for a in (q, kp, vp, table, lengths))
        tout = osm.attention(tq, kv_cache=(tk, tv), page_table=tt, cache_lengths=tn, check_cache=False)
        torch.cuda.synchronize()
        assert torch.isnan(tout[0]).all() and not torch.isnan(tout[1]).any()
