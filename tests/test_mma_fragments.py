"""CPU tier: the mma.sync.m16n8k16 fragment maps in NumPy (onlinesoftmax/kernels/attention/mma_fragments.py)
and the tensor-core kernels' index maps built on them: every element held once, the PTX ISA's
formulas at chosen lanes, an mma on fragments equal to a matrix product, ldmatrix, and one warp's
S = Q K^T and O += P V replayed with exactly the kernels' loads, equal to the products (small
integers, so every sum is exact). Deliberately wrong maps are rejected. Bank-conflict counts."""
import numpy as np
import pytest

from onlinesoftmax.kernels.attention import mma_fragments as mf


def ints(rng, *shape):
    return rng.integers(-8, 9, size=shape).astype(np.float64)


def scores_matrix(s):
    return np.concatenate([mf.scatter(s[j], mf.C_MAP, (16, 8)) for j in range(s.shape[0])], axis=1)


@pytest.mark.parametrize("layout, shape", [(mf.A_MAP, (16, 16)), (mf.B_MAP, (16, 8)), (mf.C_MAP, (16, 8))])
def test_every_element_is_held_by_exactly_one_lane_register_and_half(layout, shape):
    x = np.arange(np.prod(shape), dtype=float).reshape(shape)
    np.testing.assert_array_equal(mf.scatter(mf.gather(x, layout), layout, shape), x)
    doubled = layout.copy()
    doubled[1] = doubled[0]          # two lanes claiming the same elements: rejected
    with pytest.raises(ValueError, match="covers"):
        mf.scatter(mf.gather(x, doubled), doubled, shape)


def test_the_maps_say_what_the_ptx_figures_say():
    # lane 0 (g 0, t 0): A rows 0 and 8, columns 0, 1 and 8, 9; lane 6 (g 1, t 2): columns 4, 5 and 12, 13
    assert mf.A_MAP[0].reshape(-1, 2).tolist() == [[0, 0], [0, 1], [8, 0], [8, 1], [0, 8], [0, 9], [8, 8], [8, 9]]
    assert mf.A_MAP[6, 2].tolist() == [[1, 12], [1, 13]] and mf.A_MAP[6, 1].tolist() == [[9, 4], [9, 5]]
    # B: lane 6 holds k 4, 5 and 12, 13 of column 1
    assert mf.B_MAP[6].reshape(-1, 2).tolist() == [[4, 1], [5, 1], [12, 1], [13, 1]]
    # C: lane 31 (g 7, t 3): rows 7 and 15, columns 6 and 7
    assert mf.C_MAP[31].tolist() == [[7, 6], [7, 7], [15, 6], [15, 7]]


def test_mma_on_fragments_is_a_matrix_product():
    rng = np.random.default_rng(0)
    A, B, C = ints(rng, 16, 16), ints(rng, 16, 8), ints(rng, 16, 8)
    d = mf.mma(mf.gather(A, mf.A_MAP), mf.gather(B, mf.B_MAP), mf.gather(C, mf.C_MAP))
    np.testing.assert_array_equal(mf.scatter(d, mf.C_MAP, (16, 8)), A @ B + C)
    # B gathered with A's map (its first 8 columns) is a different matrix: the product is wrong
    wrong = mf.mma(mf.gather(A, mf.A_MAP), mf.gather(np.hstack([B, B]), mf.A_MAP)[:, :2], mf.gather(C, mf.C_MAP))
    assert not np.array_equal(mf.scatter(wrong, mf.C_MAP, (16, 8)), A @ B + C)


def test_ldmatrix_hands_out_a_and_b_fragments():
    rng = np.random.default_rng(1)
    tile = ints(rng, 16, 16)                       # an A operand stored row-major
    memory = tile.reshape(-1)
    lane = np.arange(32)
    rows = (lane & 7) + 8 * ((lane >> 3) & 1)      # matrices: rows 0-7 / 8-15, then columns 0-7 / 8-15
    cols = 8 * (lane >> 4)
    np.testing.assert_array_equal(mf.ldmatrix(memory, rows * 16 + cols), mf.gather(tile, mf.A_MAP))
    # .trans of a k x n tile stored row-major gives B fragments (two n-tiles of 8)
    b_tile = ints(rng, 16, 16)
    regs = mf.ldmatrix(b_tile.reshape(-1), ((lane & 7) + 8 * ((lane >> 3) & 1)) * 16 + 8 * (lane >> 4), trans=True)
    np.testing.assert_array_equal(regs[:, 0:2], mf.gather(b_tile[:, :8], mf.B_MAP))
    np.testing.assert_array_equal(regs[:, 2:4], mf.gather(b_tile[:, 8:], mf.B_MAP))
    assert not np.array_equal(mf.ldmatrix(b_tile.reshape(-1), rows * 16 + cols)[:, 0:2],
                              mf.gather(b_tile[:, :8], mf.B_MAP))   # without .trans: not a B fragment
    with pytest.raises(ValueError, match="aligned"):
        mf.ldmatrix(memory, rows * 16 + cols + 1)


def test_the_swizzle_is_a_permutation_of_each_row():
    for d in (64, 128):
        rows, cols = np.meshgrid(np.arange(64), np.arange(d), indexing="ij")
        offsets = mf.swizzled(rows, cols, d)
        assert sorted(offsets.reshape(-1).tolist()) == list(range(64 * d))
        assert (offsets // d == rows).all(), "a chunk never leaves its row"


@pytest.mark.parametrize("d", (64, 128))
@pytest.mark.parametrize("step", (3, 4))
def test_one_warp_replayed_with_the_kernels_loads_is_exact(step, d):
    rng = np.random.default_rng(step * 100 + d)
    q, k, v = ints(rng, 16, d), ints(rng, 64, d), ints(rng, 64, d)
    s = mf.warp_scores(q, k, step)
    np.testing.assert_array_equal(scores_matrix(s), q @ k.T)
    o = mf.warp_output(s, v, step)
    np.testing.assert_array_equal(scores_matrix(o), (q @ k.T) @ v)


def test_a_wrong_register_order_for_p_is_rejected(monkeypatch):
    """P's A fragment built from n-tiles 2kk + 1 and 2kk swapped: the replayed P V is wrong."""
    rng = np.random.default_rng(3)
    q, k, v = ints(rng, 16, 64), ints(rng, 64, 64), ints(rng, 64, 64)
    s = mf.warp_scores(q, k, 4)
    good = mf.p_fragment
    monkeypatch.setattr(mf, "p_fragment", lambda s, kk: good(s, kk)[:, [2, 3, 0, 1]])
    assert not np.array_equal(scores_matrix(mf.warp_output(s, v, 4)), (q @ k.T) @ v)


def test_a_swizzle_on_store_without_the_swizzle_on_load_is_rejected(monkeypatch):
    rng = np.random.default_rng(4)
    q, k = ints(rng, 16, 128), ints(rng, 64, 128)
    stored = mf.swizzled
    calls = []

    def store_swizzled_load_plain(row, col, d):
        calls.append(1)
        return stored(row, col, d) if len(calls) == 1 else mf.plain(row, col, d)
    monkeypatch.setattr(mf, "swizzled", store_swizzled_load_plain)
    assert not np.array_equal(scores_matrix(mf.warp_scores(q, k, 4)), q @ k.T)


def test_wavefront_counts():
    lane = np.arange(32)
    assert mf.wavefronts(4 * lane, 4) == 1                    # 32 consecutive words: every bank once
    assert mf.wavefronts(128 * lane, 4) == 32                 # one bank, 32 words: 32-way conflict
    assert mf.wavefronts(np.zeros(32, int), 4) == 1           # one word for all: a broadcast
    assert mf.wavefronts(16 * lane, 16) == 4                  # 16-byte loads: 4 phases of 8 lanes
    assert mf.wavefronts(256 * lane, 16) == 32                # 8 rows of 256 bytes at one column: 8-way, 4 phases


@pytest.mark.parametrize("d", (64, 128))
def test_the_swizzled_ldmatrix_loads_are_conflict_free_and_the_plain_ones_are_not(d):
    plain, swizzled = mf.tile_wavefronts(3, d), mf.tile_wavefronts(4, d)
    assert swizzled["K"]["wavefronts"] == 4 * swizzled["K"]["instructions"]   # 4 matrices, one wavefront each
    assert swizzled["V"]["wavefronts"] == 4 * swizzled["V"]["instructions"]
    assert plain["K"]["wavefronts"] == 8 * plain["K"]["instructions"]         # the 8-way conflict of step 3
    assert plain["V"]["wavefronts"] > plain["V"]["instructions"]
    # the same ldmatrix addresses without the swizzle: every matrix 8-way
    rows = mf.ldmatrix_rows_k(0, 0)
    assert mf.wavefronts(2 * mf.plain(rows[:, 0], rows[:, 1], d), 16) == 32
