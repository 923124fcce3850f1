"""variant="auto": which kernel runs a call, chosen from (rows, N, dtype, mask) and the device.

The rule for an unmasked softmax follows the H200 measurements of the softmax-fast suite
(data/h200/*-softmax-fast.json; chapter 06 shows them). A kernel that needs a newer GPU than the
current one (`Variant.min_cc`) is never chosen: below compute capability 9.0 there are no
thread-block clusters, so the rows that would get a cluster get the split kernel or the
shared-memory kernel instead.
"""
from __future__ import annotations

from dataclasses import dataclass

from onlinesoftmax.kernels.softmax.fast import CLUSTER, PIPELINED, REGISTERS, SHARED, SPLIT, WARP_PER_ROW
from onlinesoftmax.kernels.softmax.fast_configs import MAX_CLUSTER, MAX_COLS_07, SHARED_TWO_BLOCKS_BYTES, \
    dtype_name
from onlinesoftmax.registry import DTYPE_ITEMSIZE, REGISTRY, Variant
from onlinesoftmax.runtime import device, driver

PIPELINED_MIN_ROWS = 1024   # 16-bit rows of 64K go to softmax_12 from here (measured at 4000)
REGISTERS_MIN_FEW_ROWS = 64   # fewer rows than SMs but at least this many: rows of 16K-32K in registers


@dataclass(frozen=True)
class Choice:
    variant: Variant
    reason: str


def clusters_usable(cc: int) -> bool:
    """Thread-block clusters need compute capability 9.0; on a GPU, a probe launch must also work."""
    if cc < 90:
        return False
    return driver.cluster_launch_works() if device.has_gpu() else True


def choose(n_rows: int, n_cols: int, dtype="float32", *, cc: int | None = None, sms: int | None = None,
           clusters: bool | None = None) -> Choice:
    """The kernel for an unmasked softmax of n_rows rows of n_cols elements of `dtype`.

    cc, sms: the device's compute capability (major * 10 + minor) and SM count; None asks the
    current device (without a GPU: the H200, 90 and 132). clusters: None decides from cc (and
    a probe launch on a GPU)."""
    dtype = dtype_name(dtype)
    if n_rows < 1 or n_cols < 1:
        raise ValueError(f"expected a non-empty shape, got ({n_rows}, {n_cols})")
    cc = device.compute_capability() if cc is None else cc
    sms = device.sm_count() if sms is None else sms
    clusters = clusters_usable(cc) if clusters is None else (clusters and cc >= 90)
    if cc < 80:   # the fast kernels' bf16 instructions need 8.0: the one-block-per-row online kernel
        return Choice(REGISTRY["softmax_03_online_masked"],
                      "compute capability below 8.0: a block per row, two passes, every dtype")
    choice = _rule(n_rows, n_cols, dtype, sms, clusters)
    assert choice.variant.min_cc <= cc, (choice, cc)
    return choice


def choose_masked(n_rows: int, n_cols: int, dtype="float32", *, cc: int | None = None) -> Choice:
    """The kernel for a masked softmax (mask=, valid_lengths=): rows up to 32K in registers with the
    mask fused (softmax_14, from compute capability 8.0), longer rows the two-pass online kernel."""
    from onlinesoftmax.kernels.softmax.masked import MASKED, REGISTERS_MASKED

    cc = device.compute_capability() if cc is None else cc
    if cc >= REGISTERS_MASKED.min_cc and n_cols <= REGISTERS_MASKED.max_cols:
        return Choice(REGISTERS_MASKED, "N <= 32K: a block per row, the row in registers, x and the mask read once")
    return Choice(MASKED, "longer rows (or compute capability below 8.0): a block per row, two passes")


def choose_log_softmax(n_rows: int, n_cols: int, dtype="float32", *, cc: int | None = None) -> Choice:
    """The kernel for log_softmax: rows up to 32K in registers (log_softmax_02, from compute capability
    8.0: one read), longer rows (or older GPUs) the two-pass online kernel."""
    from onlinesoftmax.kernels.logsumexp.log_softmax_registers import LOG_SOFTMAX_REGISTERS

    cc = device.compute_capability() if cc is None else cc
    if cc >= LOG_SOFTMAX_REGISTERS.min_cc and n_cols <= LOG_SOFTMAX_REGISTERS.max_cols:
        return Choice(LOG_SOFTMAX_REGISTERS, "N <= 32K: the row in registers, read once")
    return Choice(REGISTRY["log_softmax_01_online"], "longer rows (or compute capability below 8.0): two reads")


def _rule(n_rows: int, n_cols: int, dtype: str, sms: int, clusters: bool) -> Choice:
    row_bytes = n_cols * DTYPE_ITEMSIZE[dtype]
    few_rows = n_rows < sms
    if n_cols <= MAX_COLS_07:
        return Choice(WARP_PER_ROW, "N <= 1024: a lane group per row, the row in registers")
    if n_cols <= 8192 or (few_rows and n_cols <= 16384):
        return Choice(REGISTERS, "N <= 8K (or 16K with few rows): a block per row, the row in registers")
    # rows of up to 32K that would go to a cluster: in registers they measured 1.10-1.18x faster for
    # fp32 rows of 28K-32K (too long for two blocks' shared memory) at 512-4000 rows, and 1.02-1.08x at
    # 64 rows of 24K-32K in fp32 and fp16 (logs/h200/2026-12-02-rule-probe.log)
    if n_cols <= REGISTERS.max_cols and ((not few_rows and row_bytes > SHARED_TWO_BLOCKS_BYTES)
                                         or (few_rows and n_rows >= REGISTERS_MIN_FEW_ROWS)):
        return Choice(REGISTERS, "rows of up to 32K that two blocks' shared memory cannot hold, or 64+ rows: "
                                 "a block per row, the row in registers")
    if not few_rows and row_bytes <= SHARED_TWO_BLOCKS_BYTES:
        return Choice(SHARED, "many rows of <= 112 KB: a block per row cached in shared memory, two blocks per SM")
    small_input = n_rows * row_bytes <= 24 * 2**20
    if few_rows and n_rows * MAX_CLUSTER < sms and small_input and row_bytes >= 512 * 1024:
        return Choice(SPLIT, "a few long rows that fit L2: split over every SM, partials merged in a second launch")
    # softmax_12 where it measured ahead of softmax_10 / 11 (suite softmax-fast-cooperative): many fp32 rows
    # of >= 1M; thousands of 16-bit rows of 64K (up to 256 KB: below, 09 wins; at 512 KB they tie).
    if clusters and not few_rows and dtype == "float32" and row_bytes > MAX_CLUSTER * SHARED_TWO_BLOCKS_BYTES:
        return Choice(PIPELINED, "many fp32 rows too long for a cluster's shared memory: persistent clusters, "
                                 "the next row's loads in flight during this row's stores")
    if clusters and n_rows >= PIPELINED_MIN_ROWS and DTYPE_ITEMSIZE[dtype] == 2 and row_bytes <= 256 * 1024:
        return Choice(PIPELINED, "thousands of 16-bit rows of 64-256 KB: persistent clusters")
    if not few_rows and row_bytes > MAX_CLUSTER * SHARED_TWO_BLOCKS_BYTES:
        return Choice(SPLIT, "many rows too long for a 16-block cluster at two blocks per SM: split, second read from L2")
    if clusters:
        return Choice(CLUSTER, "long rows or few rows: a cluster of blocks per row")
    if not few_rows:
        return Choice(SHARED, "no clusters, many rows: a block per row cached in shared memory")
    return Choice(SPLIT, "no clusters, few rows: partial states and a merge launch")
