"""Launcher module of sampling_02_split: sampling_01_rows' tokens for a few long rows, each row's chunks
spread over blocks, one launch per pass (kernels/sampling/sampling_02_split.cu has the protocol).

The kernel draws the same tokens as sampling_01_rows (every decision is an exact integer sum or a
max), so its model is rows.simulate and `choose` can route a call to either kernel without changing
what it returns.
"""
from __future__ import annotations

import math

import numpy as np

from onlinesoftmax.kernels.sampling import rows
from onlinesoftmax.registry import DTYPES, Launch, Variant, dtype_entries, register
from onlinesoftmax.runtime import driver
from onlinesoftmax.runtime.loader import get_kernel

NAME = "sampling_02_split"
MIN_CHUNK = 4096           # tokens a block takes at least (a smaller chunk spends more on its partials)
CHUNK_ALIGN = 256          # chunk starts keep a row's 16-byte phase for every dtype
BLOCKS_PER_SM = 2          # the grid aims at this many blocks per SM
PASS_MAX, PASS_BINS, PASS_GATHER, PASS_SAMPLE = 0, 1, 2, 3
STATE_WORDS = 5            # sizeof(SplitState) = 40 bytes, as 64-bit words
BINS = CANDIDATES = 2048   # the row's histogram and its gathered tokens (sampling_bins.cuh)
MAX_ROWS = 65535           # the rows on the grid's y (at most 65,535 blocks)
SELECT_MAX_ROWS = 32       # with top-k or top-p, choose's limit (its doc)


def chunking(n_rows: int, n_cols: int, sms: int) -> tuple[int, int]:
    """(chunks per row, tokens per chunk): enough blocks for BLOCKS_PER_SM per SM over the batch, no
    chunk under MIN_CHUNK tokens, chunk sizes a multiple of CHUNK_ALIGN."""
    wanted = max(1, min(math.ceil(BLOCKS_PER_SM * sms / max(n_rows, 1)), math.ceil(n_cols / MIN_CHUNK)))
    chunk = CHUNK_ALIGN * math.ceil(math.ceil(n_cols / wanted) / CHUNK_ALIGN)
    return math.ceil(n_cols / chunk), chunk


def passes(top_k, top_p, min_p, temperature, n_cols: int) -> list[int]:
    """The launches of one call: the maximum; the histogram when some row may use top-k or top-p, and
    the gather of top-k's bin when some row may use top-k (a per-row array: always); the sampling pass
    unless every row is greedy (min_p needs no pass of its own)."""
    array = lambda v: not np.isscalar(v)   # noqa: E731
    chosen = [PASS_MAX]
    uses_k = array(top_k) or 0 < int(top_k) < n_cols
    if uses_k or array(top_p) or float(top_p) < 1.0:
        chosen.append(PASS_BINS)
    if uses_k:
        chosen.append(PASS_GATHER)
    if array(temperature) or float(temperature) >= rows.GREEDY_BELOW:
        chosen.append(PASS_SAMPLE)
    return chosen


def choose(n_rows: int, n_cols: int, sms: int | None = None, selects: bool = False):
    """variant="auto" for sample: this kernel while the batch leaves at least two SMs per row and a row
    makes at least two chunks, sampling_01_rows otherwise. selects: some row uses top-k or top-p, which
    cost this kernel a launch or two more and sampling_01_rows one or two more reads of the row: then
    this kernel only up to SELECT_MAX_ROWS rows (with those filters on an H100, 32,000 to 262,144 bf16
    logits, this kernel took 0.19-0.93 of a block per row's time at batch 1, 0.55-1.06 at batch 32 and
    1.1-1.8 at batch 256)."""
    from onlinesoftmax.kernels.dispatch import Choice
    from onlinesoftmax.registry import REGISTRY

    if sms is None:
        from onlinesoftmax.runtime import device

        sms = device.sm_count()
    few_long = 2 * n_rows <= sms and chunking(n_rows, n_cols, sms)[0] >= 2
    if few_long and not (selects and n_rows > SELECT_MAX_ROWS):
        return Choice(REGISTRY[NAME], "a few long rows: each row's chunks over blocks")
    return Choice(REGISTRY["sampling_01_rows"], "a block per row")


def geometry(n_rows: int, n_cols: int) -> Launch:
    """On the H200's 132 SMs (without a GPU) or this GPU's."""
    from onlinesoftmax.runtime import device

    n_chunks, chunk = chunking(n_rows, n_cols, device.sm_count())
    return Launch(grid=(n_chunks, n_rows), block=(rows.block_threads(chunk),))


def plan(variant: Variant, x, tokens, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, offset=0):
    """runner(x, tokens, temperature=, top_k=, top_p=, min_p=, seed=, offset=): the passes the
    parameters need, one launch each, over a workspace the runner owns (its arrival counters start
    at zero and every pass leaves them at zero)."""
    import cupy

    from onlinesoftmax.runtime import device

    n_rows, n_cols = x.shape
    n_chunks, chunk = chunking(n_rows, n_cols, device.sm_count())
    kernel = get_kernel(variant.path, variant.dtype_entry(x.dtype.name), variant.defines)
    states = cupy.zeros((n_rows, STATE_WORDS), cupy.uint64)
    key_part = cupy.empty((n_rows, n_chunks), cupy.float32)
    index_part = cupy.empty((n_rows, n_chunks), cupy.int32)
    # x, tokens, temperatures, top_ks, top_ps, min_ps, temperature, top_k, top_p, min_p, n, x_stride,
    # seed_lo, seed_hi, offset_lo, offset_hi, states, bin_count, bin_mass, cand_s, cand_index, key_part,
    # index_part, chunk_elems, pass
    types = (rows.POINTER,) * 6 + (rows.FLOAT, rows.INT, rows.FLOAT, rows.FLOAT, rows.INT, rows.LONG) + \
        (rows.UINT,) * 4 + (rows.POINTER,) * 7 + (rows.INT, rows.INT)
    fixed = {10: n_cols, 11: x.strides[0] // x.itemsize, 16: states.data.ptr, 21: key_part.data.ptr,
             22: index_part.data.ptr, 23: chunk}
    bins = (cupy.zeros((n_rows, BINS), cupy.uint32), cupy.zeros((n_rows, BINS), cupy.uint64),   # 40 KB a row
            cupy.empty((n_rows, CANDIDATES), cupy.float32), cupy.empty((n_rows, CANDIDATES), cupy.int32))
    fixed |= dict(zip((17, 18, 19, 20), (a.data.ptr for a in bins)))
    launches = {p: driver.prepare_launch(kernel, (n_chunks, n_rows), (rows.block_threads(chunk),), 0, 1, types,
                                         fixed=fixed | {24: p})
                for p in range(PASS_SAMPLE + 1)}

    def run(x, tokens, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=0, offset=0, **_):
        args = rows.launch_values(x, tokens, temperature, top_k, top_p, min_p, seed, offset)
        for p in passes(top_k, top_p, min_p, temperature, n_cols):
            launches[p](*args)
    run.workspace = (states, key_part, index_part, *bins)
    return run


SAMPLING_SPLIT = register(Variant(
    name=NAME, family="sampling", file=f"sampling/{NAME}.cu", short="split",
    story="sampling_01_rows' tokens with each row's chunks over blocks: a launch per pass, the row's last "
          "block to arrive combining the partials (for batches of a few long rows)",
    geometry=geometry, simulate=rows.simulate, plan=plan, reads_per_element=1, writes_per_element=0, dtypes=DTYPES,
    entry=f"{NAME}_f32", entries=dtype_entries))
