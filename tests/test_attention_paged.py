"""CPU tier for attention_08_paged_decode (decoding against a paged KV cache): the NumPy model and the
kernel's own CUDA source on the CPU emulator against the float64 reference and against the
contiguous decode kernel on the same keys (error rule: at most twice the model's error plus two
ulps), over mixed lengths (0, 1, odd, several splits), page sizes (1, 3, 16, 64) and grouped heads;
the judge shown failing on a wrong page, a length ignored and a causal diagonal misaligned; the
split rule; the API's checks of pages and lengths. Needs g++ for the emulated part."""

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import blocked as ab
from onlinesoftmax.kernels.attention import decode_mma as dm
from onlinesoftmax.kernels.attention import paged


def make_paged(batch, heads, kv_heads, n_q, lengths, d, page_size, dtype, seed, spare=3):
    return paged.example(batch, heads, kv_heads, n_q, lengths, d, page_size, dtype, seed, spare)


def judge(out, lse, q, kp, vp, table, lengths, causal):
    passed, message = paged.compare(out, lse, q, kp, vp, table, lengths, causal)
    assert passed, message


# batch, heads, kv_heads, n_q, lengths, d, page size, dtype, causal
SHAPES = [(3, 8, 2, 1, (100, 0, 37), 128, 16, "bfloat16", False),
          (2, 4, 4, 1, (1, 700), 64, 3, "float16", False),          # one head per kv head, odd pages
          (2, 16, 2, 2, (600, 5), 64, 64, "bfloat16", True),        # two queries, causal per sequence
          (1, 8, 1, 1, (40,), 128, 1, "float16", False),            # a page per key
          (4, 8, 8, 3, (3, 2, 0, 300), 64, 16, "bfloat16", True)]  # queries that see no key


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_model_is_within_the_rule(shape):
    *dims, lengths, d, page_size, dtype, causal = shape
    q, kp, vp, table, lengths = make_paged(*dims, lengths, d, page_size, dtype, seed=sum(dims))
    out, lse = paged.simulate(q, kp, vp, table, lengths, causal=causal)
    ref, _ = paged.reference(q, kp, vp, table, lengths, causal=causal)
    assert float(np.abs(checks.as_float64(out) - ref).max()) <= 4 * checks.EPS[dtype] * max(1, float(np.abs(ref).max()))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernel_source_on_the_emulator(shape, needs_emulator):
    *dims, lengths, d, page_size, dtype, causal = shape
    q, kp, vp, table, lengths = make_paged(*dims, lengths, d, page_size, dtype, seed=sum(dims))
    out, lse = paged.emulate(q, kp, vp, table, lengths, causal, sms=4, seed=3)
    judge(out, lse, q, kp, vp, table, lengths, causal)


def test_several_splits_of_one_sequence_on_the_emulator(needs_emulator):
    q, kp, vp, table, lengths = make_paged(2, 4, 1, 1, (1100, 257), 64, 32, "bfloat16", seed=9)
    assert paged.sequence_splits(1100, paged.splits_for(1, 4, 1, 1, 1100, 132))[0] > 1
    out, lse = paged.emulate(q, kp, vp, table, lengths, sms=132, seed=4)
    judge(out, lse, q, kp, vp, table, lengths, False)


@pytest.mark.parametrize("sms", [4, 8, 64])
def test_the_kernel_shares_the_keys_out_as_the_model_does(sms, needs_emulator):
    """The device's split_share (warp 0 sums the lengths, then bisects) against paged.split_share:
    each sequence's non-empty splits, seen as finite partial LSEs, are the model's. On 4 and 8 SMs
    the plan fits one wave and the share from the lengths alone would spill (more splits than the
    wave holds: the bisection runs, to the longest length on 4 SMs, to a spare-split bound on 8); on
    64 SMs the splits fit as they are: the share stays the one from the lengths (MIN_KEYS here)."""
    # on 64 SMs a third of the keys make the same point (every split fits) in a third of the emulator's time
    lengths = [3000, 40, 700, 0, 5200, 1500] if sms < 64 else [1000, 40, 230, 0, 1700, 500]
    q, kp, vp, table, lengths = paged.example(6, 4, 2, 1, lengths, 64, 16, "bfloat16", seed=6)
    base, grid, most = paged.plan_splits(6, 4, 2, 1, table.shape[1] * 16, sms)
    share, plain = paged.split_share(lengths, base, most), paged.split_share(lengths, base)
    counts = {s: sum(paged.sequence_splits(int(n), grid, s)[0] for n in lengths) for s in (share, plain)}
    if sms < 64:
        assert most and counts[plain] > most >= counts[share] and share > plain, (most, counts)
    else:
        assert counts[plain] <= most and share == plain
    _, _, lse_part = paged.emulate(q, kp, vp, table, lengths, sms=sms, seed=5, partials=True)
    assert lse_part.shape[0] == grid
    for b, n in enumerate(lengths):
        used, per = paged.sequence_splits(int(n), grid, share)
        want = sum(1 for s in range(used) if s * per < n)
        assert (np.isfinite(lse_part[:, 4 * b:4 * b + 4]).sum(axis=0) == want).all(), (b, n, want)


def test_paged_matches_the_contiguous_decode_kernel(needs_emulator):
    """The same keys as a contiguous cache (every sequence of one length) and as pages."""
    batch, heads, kv_heads, n, d = 2, 8, 2, 300, 64
    q, kp, vp, table, lengths = make_paged(batch, heads, kv_heads, 1, (n, n), d, 16, "float16", seed=5)
    k = np.stack([paged.gather(kp, vp, table, lengths, b)[0] for b in range(batch)]).astype(np.float16)
    v = np.stack([paged.gather(kp, vp, table, lengths, b)[1] for b in range(batch)]).astype(np.float16)
    contiguous, _ = dm.emulate(q, k, v, sms=4, seed=2)
    pages, _ = paged.emulate(q, kp, vp, table, lengths, sms=4, seed=2)
    ref, _ = ab.reference(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    model_err = float(np.abs(checks.as_float64(dm.simulate(q, k, v)[0]) - ref).max())
    assert float(np.abs(checks.as_float64(pages) - checks.as_float64(contiguous)).max()) <= 2 * model_err + \
        2 * checks.EPS["float16"]


def test_the_judge_rejects_wrong_caches():
    q, kp, vp, table, lengths = make_paged(2, 8, 2, 2, (200, 90), 64, 16, "bfloat16", seed=6)
    swapped = table.copy()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]                    # two pages read in the wrong order... still a set
    other = table.copy()
    other[1, 0] = table[0, 0]                                  # another sequence's page
    capacity = np.full_like(lengths, table.shape[1] * 16)      # lengths ignored: every slot of the pages read
    wrong = {"another sequence's page": (other, lengths, True),
             "the lengths ignored": (table, np.minimum(capacity, 200), True),
             "the causal diagonal at the capacity, not the length": (table, lengths, False)}
    for name, (t, n, causal) in wrong.items():
        out, lse = paged.simulate(q, kp, vp, t, n, causal=causal)
        with pytest.raises(AssertionError):
            judge(out, lse, q, kp, vp, table, lengths, True)
            pytest.fail(f"{name} passed")
    out, lse = paged.simulate(q, kp, vp, swapped, lengths, causal=False)   # without causal the order does not matter
    judge(out, lse, q, kp, vp, table, lengths, False)


def test_each_sequence_divides_its_own_keys():
    for length in (0, 1, 31, 255, 256, 257, 1000, 131072):
        for splits in (1, 2, 7, 66):
            used, per = paged.sequence_splits(length, splits)
            assert 1 <= used <= splits and per % 32 == 0 and used * per >= length
            assert used == 1 or length > paged.MIN_KEYS * (used - 1)
    assert paged.splits_for(1, 32, 8, 1, 2**17, 132) == paged.splits_for(1, 32, 8, 1, 2**17, 132, 3) > 1
    # the wave rule: batch 8 of 32 heads over 8 kv heads gets 6 splits (384 blocks, one wave of 396),
    # not the 7 that cover every slot and take two waves; batch 64 gets 3 (1,536 blocks over 4 waves)
    assert [paged.splits_for(b, 32, 8, 1, 2**17, 132) for b in (8, 64)] == [6, 3]
    assert paged.splits_for(8, 32, 8, 1, 300, 132) == 2       # no split under 256 keys of the capacity


def test_the_keys_are_shared_out_in_proportion_to_the_lengths():
    """Mixed lengths (1K to 128K keys, log-uniform, as the serving suite draws them): the busiest block
    reads about an even share of the batch's keys; the rule that splits each sequence by its own
    length alone (a share of MIN_KEYS over the base grid) leaves the longest sequence's blocks 3 to 5
    times an even share: that wrong answer fails the same bound."""
    lengths = np.exp(np.random.default_rng(0).uniform(np.log(1024), np.log(131072), 64)).astype(int)
    for batch in (8, 64):
        n = lengths[:batch]
        base = paged.splits_for(batch, 32, 8, 1, 131072, 132)
        busiest, even = paged.block_keys(n, base)
        assert busiest.max() <= 1.3 * even, (batch, busiest.max(), even)
        most = paged.wave_pairs(base, batch, 8, 132 * paged.BLOCKS_PER_SM)
        share = paged.split_share(n, base, most)
        busiest, even = paged.block_keys(n, base, most)
        assert busiest.max() <= 1.3 * even, (batch, busiest.max(), even)
        used = [paged.sequence_splits(int(k), paged.grid_splits(base, batch), share)[0] for k in n]
        assert sum(used) <= 1.25 * batch * base      # about the blocks the base plan fills the GPU with
        if batch == 8:   # one wave: the splits fit it, where the share from the lengths alone spills over
            spilled = [paged.sequence_splits(int(k), paged.grid_splits(base, 8), paged.split_share(n, base))[0]
                       for k in n]
            assert sum(used) <= most < sum(spilled), (used, most, spilled)
        else:
            assert most == 0
        by_own_length = max(min(paged.sequence_splits(int(k), base)[1], int(k)) for k in n)
        assert by_own_length > 2 * even, "the old rule must fail the bound above"
    assert paged.grid_splits(6, 1) == 6 and paged.grid_splits(6, 8) == 6 * paged.BALANCE
    assert paged.split_share([100] * 4, 2) == paged.MIN_KEYS and paged.split_share([4096] * 4, 2) == 2048
    equal = [131072] * 8                             # equal lengths: every sequence its base splits
    base = paged.splits_for(8, 32, 8, 1, 131072, 132)
    assert paged.sequence_splits(131072, paged.grid_splits(base, 8), paged.split_share(equal, base))[0] == base


def test_the_api_checks_pages_and_lengths():
    q, kp, vp, table, lengths = make_paged(2, 8, 2, 1, (40, 7), 64, 16, "bfloat16", seed=7)
    out, lse = osm.attention(q, kv_cache=(kp, vp), page_table=table, cache_lengths=lengths, return_lse=True)
    judge(out, lse, q, kp, vp, table, lengths, False)
    call = lambda **changed: osm.attention(**({"q": q, "kv_cache": (kp, vp), "page_table": table,  # noqa: E731
                                                "cache_lengths": lengths} | changed))
    bad_page = table.copy()
    bad_page[0, 1] = 99
    cases = [({"cache_lengths": np.array([40, 49])}, ValueError, r"cache_lengths\[1\] = 49 is outside \[0, 48\]"),
             ({"cache_lengths": np.array([-1, 7])}, ValueError, "outside"),
             ({"page_table": bad_page}, ValueError, r"page_table\[0, 1\] = 99 is not a page"),
             ({"page_table": table.astype(np.float32)}, ValueError, "page_table must be integers"),
             ({"kv_cache": (kp, vp[:, :8])}, ValueError, "k_pages, v_pages both"),
             ({"kv_cache": (kp.astype(np.float32), vp)}, TypeError, "float16 or bfloat16"),
             ({"kv_cache": (kp,)}, TypeError, "kv_cache=\\(k_pages, v_pages\\)"),
             ({"k": kp}, TypeError, "no k or v"),
             ({"variant": "decode_mma"}, ValueError, "variant 'auto' or 'paged'"),
             ({"cache_lengths": lengths[:1]}, ValueError, "cache_lengths must be integers of shape"),
             ({"q": q[:, :5]}, ValueError, "multiple of the pools' kv_heads")]
    for changed, error, message in cases:
        with pytest.raises(error, match=message):
            call(**changed)
    table[1, 1:] = 12345          # entries past a sequence's pages are never read, never checked
    call(page_table=table)
    with pytest.raises(TypeError, match="give k and v"):
        osm.attention(q)
    with pytest.raises(TypeError, match="check_cache must be True or False"):
        call(check_cache=0)
    with pytest.raises(TypeError, match="check_cache applies to a paged cache"):
        osm.attention(q, q, q, check_cache=False)
    packed = np.zeros((7, 8, 64), np.float16)
    with pytest.raises(TypeError, match="check_cache applies to a paged cache"):
        osm.attention(packed, packed[:, :2], packed[:, :2], cu_seqlens_q=np.array([0, 7], np.int32),
                      cu_seqlens_k=np.array([0, 7], np.int32), check_cache=False)
    huge = np.zeros((2, 2**19), np.int32)   # 2^19 entries of pages of 2^12 keys: 2^31 keys a sequence
    with pytest.raises(ValueError, match="at most 1073741824 keys"):
        osm.attention(q, kv_cache=(np.zeros((1, 2**12, 2, 64), q.dtype),) * 2, page_table=huge, cache_lengths=lengths,
                      check_cache=False)


def test_a_pool_off_a_16_byte_boundary_is_an_error(monkeypatch):
    """The kernel reads the pools in 16-byte vectors and never copies them, so a GPU pool that starts
    off a boundary is refused before any launch (a misaligned load would end the CUDA context). The
    offsets come from start_offset, 0 for NumPy: here it is made to report one."""
    import importlib

    attention_paged = importlib.import_module("onlinesoftmax.attention_paged")   # (the package's own name is the kernels')
    q, kp, vp, table, lengths = make_paged(1, 8, 2, 1, (40,), 64, 16, "bfloat16", seed=7)
    class Pointer:   # what start_offset reads of a GPU array
        def __init__(self, ptr):
            self.data = type("Memory", (), {"ptr": ptr})()
    assert [attention_paged.start_offset(Pointer(p)) for p in (4096, 4098, 4111)] == [0, 2, 15]
    assert attention_paged.start_offset(kp) == 0
    monkeypatch.setattr(attention_paged, "start_offset", lambda pool: 2 if pool is vp else 0)
    with pytest.raises(ValueError, match="16-byte boundary .* k_pages 0 bytes past one, v_pages 2 bytes past one"):
        osm.attention(q, kv_cache=(kp, vp), page_table=table, cache_lengths=lengths)


def test_unchecked_entries_outside_int32_are_wrong_not_wrapped():
    """check_cache=False with int64 (or uint) entries: a page number or a length past int32 would wrap
    to a valid-looking one in a plain cast (2^32 + 1 to page 1, 2^32 + 40 to 40 keys); the call maps
    it to -1 on the device instead, so its sequence comes out NaN, the others right."""
    q, kp, vp, table, lengths = make_paged(3, 8, 2, 1, (40, 7, 20), 64, 16, "bfloat16", seed=7)
    wide_table, wide_lengths = table.astype(np.int64), lengths.astype(np.int64)
    wide_table[0, 1] = 2**32 + 1
    wide_lengths[2] = 2**32 + 7
    out, lse = osm.attention(q, kv_cache=(kp, vp), page_table=wide_table, cache_lengths=wide_lengths,
                             return_lse=True, check_cache=False)
    assert np.isnan(lse[0]).all() and np.isnan(lse[2]).all() and np.isnan(checks.as_float64(out[[0, 2]])).all()
    judge(out[1:2], lse[1:2], q[1:2], kp, vp, table[1:2], lengths[1:2], False)
    from onlinesoftmax.attention_paged import as_int32
    assert as_int32(np.array([2**32 + 1, -2**40, 5], np.int64)).tolist() == [-1, -1, 5]
    assert as_int32(np.array([2**31, 3], np.uint32)).tolist() == [-1, 3]
    assert as_int32(np.array([2**63, 3], np.uint64)).tolist() == [-1, 3]
    assert np.array([2**32 + 1], np.int64).astype(np.int32).tolist() == [1]   # what a plain cast would give


# (what is wrong, lengths, the table changed by, which sequences come out NaN); sequence 1 uses
# entries 0 .. 2 of its row (40 keys in pages of 16), sequence 2 entry 0 (7 keys). The wrong pages
# and lengths point just outside the pool or the table, where the emulator's guard regions fault on
# a read, so a kernel that read them would fail here.
UNCHECKED = [("a page number past the pool", (5, 40, 7), lambda t: t.__setitem__((1, 2), 9), [1]),
             ("a negative page number", (5, 40, 7), lambda t: t.__setitem__((2, 0), -1), [2]),
             ("a length past the table", (5, 40, 49), lambda t: None, [2]),
             ("a negative length", (-3, 40, 7), lambda t: None, [0]),
             ("nothing", (5, 40, 7), lambda t: None, [])]


@pytest.mark.parametrize("case", UNCHECKED, ids=[c[0] for c in UNCHECKED])
def test_unchecked_wrong_entries_give_nan_rows_and_no_stray_read(case, needs_emulator):
    """check_cache=False: no host check; the kernel (its source on the emulator, which faults on a
    read outside an array) reads nothing outside the pool or the table, and the sequences with a
    wrong length or page come out NaN, outputs and LSE, as the model says; the others are right."""
    _, lengths, spoil, wrong = case
    q, kp, vp, table, _ = paged.example(3, 8, 2, 1, (5, 40, 7), 64, 16, "bfloat16", seed=8, spare=0)
    assert kp.shape[0] == 9 and table.shape == (3, 3)
    spoil(table)
    lengths = np.array(lengths, np.int32)
    expect = paged.wrong_sequences(table, lengths, kp.shape[0], 16)
    assert list(np.flatnonzero(expect)) == wrong
    out, lse = paged.emulate(q, kp, vp, table, lengths, sms=4, seed=2)
    model, model_lse = osm.attention(q, kv_cache=(kp, vp), page_table=table, cache_lengths=lengths,
                                     return_lse=True, check_cache=False)
    for b in range(3):
        got = checks.as_float64(out[b])
        assert np.isnan(got).all() == np.isnan(lse[b]).all() == np.isnan(model_lse[b]).all() == (b in wrong), b
        assert not np.isnan(got).any() or b in wrong, b
    right = [b for b in range(3) if b not in wrong]
    if right:
        judge(out[right], lse[right], q[right], kp, vp, table[right], lengths[right], False)


def first_bad_by_loop(table, lengths, pages, page_size):
    """first_bad_entry's number, one entry at a time."""
    batch, per_seq = table.shape
    for b in range(batch):
        if not 0 <= int(lengths[b]) <= per_seq * page_size:
            return b
    for b in range(batch):
        for i in range(-(-int(lengths[b]) // page_size)):
            if not 0 <= int(table[b, i]) < pages:
                return batch + b * per_seq + i
    return batch + batch * per_seq


def test_the_first_bad_entry_is_the_loops(seed=11):
    """The paged call's one check, on tables with planted wrong pages (some past a sequence's
    length, where they are never read) and wrong lengths, against a loop over the entries; three
    wrong answers rejected: pages past the length checked, the length bound off by one, pages
    checked before lengths."""
    from onlinesoftmax.attention_paged import first_bad_entry

    rng = np.random.default_rng(seed)
    wrong = {"pages past the length checked": lambda t, n, pages, size: first_bad_by_loop(
                 t, np.full_like(n, t.shape[1] * size), pages, size) if (n >= 0).all() and (n <= t.shape[1] * size).all()
             else first_bad_by_loop(t, n, pages, size),
             "length bound off by one": lambda t, n, pages, size: first_bad_by_loop(t, n + (n == t.shape[1] * size),
                                                                                     pages, size),
             "pages before lengths": lambda t, n, pages, size: next(
                 code for code in (first_bad_by_loop(t, np.clip(n, 0, t.shape[1] * size), pages, size),
                                   first_bad_by_loop(t, n, pages, size)) if code != t.size + t.shape[0]
             ) if first_bad_by_loop(t, n, pages, size) != t.size + t.shape[0] else t.size + t.shape[0]}
    caught = dict.fromkeys(wrong, False)
    for case in range(300):
        batch, per_seq, page_size, pages = (int(rng.integers(1, 6)), int(rng.integers(0, 7)),
                                            int(rng.integers(1, 5)), int(rng.integers(1, 9)))
        table = rng.integers(0, pages, (batch, per_seq)).astype(rng.choice([np.int32, np.int64, np.uint8]))
        lengths = rng.integers(0, per_seq * page_size + 1, batch)
        for _ in range(int(rng.integers(0, 3))):
            if per_seq and rng.random() < 0.7:
                table[rng.integers(batch), rng.integers(per_seq)] = rng.choice([pages, pages + 200, 255])
            else:
                lengths[rng.integers(batch)] = rng.choice([-1, per_seq * page_size + 1])
        want = first_bad_by_loop(table, lengths, pages, page_size)
        assert first_bad_entry(table, lengths, pages, page_size) == want, (case, table, lengths, pages, page_size)
        for name, answer in wrong.items():
            caught[name] |= answer(table, lengths, pages, page_size) != want
    assert all(caught.values()), caught


def test_the_gather_grader_passes_the_answer_and_rejects_wrong_ones():
    from onlinesoftmax.book.exercises import exercises_paged as ep

    assert ep.check_gather_keys(ep.gather_keys, quiet=True)
    wrong = {"the stub": lambda pool, row, n: None,
             "the table ignored (pages in pool order)": lambda pool, row, n: pool.reshape(-1, pool.shape[2])[:n],
             "page and slot swapped": lambda pool, row, n: pool[row[np.arange(n) % pool.shape[1]] if pool.shape[1] > 1
                                                                else row[np.arange(n)], np.arange(n) // pool.shape[1]
                                                                if pool.shape[1] > 1 else 0],
             "the length ignored (whole pages)": lambda pool, row, n: pool[row[row >= 0]].reshape(-1, pool.shape[2]),
             "right on the visible pools only": lambda pool, row, n: ep.gather_keys(pool, row, n)
             if pool.shape in ((6, 4, 3), (7, 1, 2)) else np.zeros((n, pool.shape[2])),
             "the last key zeroed (a key index past the pool's pages)": _last_key_zeroed}
    for name, fn in wrong.items():
        assert not ep.check_gather_keys(fn, quiet=True), name   # FAILED printed, never an IndexError


def _last_key_zeroed(pool, row, n):
    from onlinesoftmax.book.exercises import exercises_paged as ep

    keys = ep.gather_keys(pool, row, n)
    if n:
        keys[-1] = 0.0
    return keys
