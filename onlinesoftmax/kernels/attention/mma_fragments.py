"""Where every element of a warp's mma.sync.m16n8k16 operands lives, in NumPy, and the index maps
the tensor-core attention kernels (attention_03 .. 05) read them with.

The hardware's maps (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), with
g = lane // 4 and t = lane % 4; a 32-bit register holds two 16-bit elements, the lower column (or
k) in its low half:

    A (16 x 16):  register 0 = row g, cols 2t, 2t+1      register 1 = row g+8, cols 2t, 2t+1
                  register 2 = row g, cols 2t+8, 2t+9    register 3 = row g+8, cols 2t+8, 2t+9
    B (16 x 8):   register 0 = k 2t, 2t+1 of column g   register 1 = k 2t+8, 2t+9 of column g
    C, D (16 x 8, fp32): c0, c1 = row g, cols 2t, 2t+1;  c2, c3 = row g+8, cols 2t, 2t+1

`A_MAP`, `B_MAP` and `C_MAP` hold them as arrays (lane, register, half) -> (row, col). `gather_*` gives
what each lane holds of a matrix, `scatter_*` puts fragments back into a matrix, `mma` is the
instruction on fragments, `ldmatrix` the shared-memory load that produces them. The kernel side:
`swizzled` (the shared-memory layout of attention_04/05), the address each lane computes
(`k_fragment_rows`, `ldmatrix_rows_k`, ...), and `warp_scores` / `warp_output`, which replay one
warp's S = Q K^T and O += P V with exactly the kernels' loads. tests/test_mma_fragments.py checks
that the replays reproduce a matrix product exactly; the CPU emulator (kernels/emulator/) runs the
kernels' own source. `wavefronts` counts shared-memory wavefronts of one warp access.
"""
from __future__ import annotations

import numpy as np

LANES = 32
M, N, K = 16, 8, 16          # the instruction's shape
KEYS = 64                    # keys per tile in the kernels (8 n-tiles of S)


def _a_map() -> np.ndarray:
    out = np.zeros((LANES, 4, 2, 2), int)
    for lane in range(LANES):
        g, t = lane >> 2, lane & 3
        for i in range(8):                       # element a_i: register i // 2, half i % 2
            row = g if (i < 2 or 4 <= i < 6) else g + 8
            col = 2 * t + (i & 1) + (8 if i >= 4 else 0)
            out[lane, i // 2, i % 2] = row, col
    return out


def _b_map() -> np.ndarray:
    out = np.zeros((LANES, 2, 2, 2), int)
    for lane in range(LANES):
        g, t = lane >> 2, lane & 3
        for i in range(4):
            out[lane, i // 2, i % 2] = 2 * t + (i & 1) + (8 if i >= 2 else 0), g
    return out


def _c_map() -> np.ndarray:
    out = np.zeros((LANES, 4, 2), int)
    for lane in range(LANES):
        g, t = lane >> 2, lane & 3
        for i in range(4):
            out[lane, i] = (g if i < 2 else g + 8), 2 * t + (i & 1)
    return out


A_MAP, B_MAP, C_MAP = _a_map(), _b_map(), _c_map()


def gather(matrix, layout) -> np.ndarray:
    """What each lane holds of `matrix` under `layout` (A_MAP, B_MAP or C_MAP): shape layout.shape[:-1]."""
    matrix = np.asarray(matrix)
    return matrix[layout[..., 0], layout[..., 1]]


def scatter(fragments, layout, shape) -> np.ndarray:
    """The matrix of `shape` whose fragments are `fragments`; every element must be held exactly once."""
    count = np.zeros(shape, int)
    np.add.at(count, (layout[..., 0], layout[..., 1]), 1)
    if not (count == 1).all():
        raise ValueError(f"the layout covers some elements {count.min()} times and others {count.max()}")
    out = np.zeros(shape, np.asarray(fragments).dtype)
    out[layout[..., 0], layout[..., 1]] = fragments
    return out


def mma(a, b, c):
    """D = A B + C on fragments: a (32, 4, 2), b (32, 2, 2), c (32, 4) -> d (32, 4), in float64."""
    A = scatter(np.asarray(a, np.float64), A_MAP, (M, K))
    B = scatter(np.asarray(b, np.float64), B_MAP, (K, N))
    C = scatter(np.asarray(c, np.float64), C_MAP, (M, N))
    return gather(A @ B + C, C_MAP)


def ldmatrix(memory, row_addresses, trans: bool = False) -> np.ndarray:
    """ldmatrix.sync.aligned.m8n8.x4(.trans).b16: `memory` a 1-D array of 16-bit elements (shared
    memory), row_addresses[lane] the element offset lane `lane` points at (lanes 8i .. 8i+7: the
    8 rows of matrix i, 8 elements each, 16-byte aligned). Returns registers (32, 4, 2): register i
    of lane l is row g, columns 2t, 2t+1 of matrix i (with trans: column g, rows 2t, 2t+1)."""
    memory, row_addresses = np.asarray(memory), np.asarray(row_addresses)
    if (row_addresses % 8).any():
        raise ValueError("ldmatrix row addresses must be 16-byte aligned (multiples of 8 elements)")
    matrices = np.stack([memory[row_addresses[8 * i:8 * i + 8, None] + np.arange(8)] for i in range(4)])
    out = np.zeros((LANES, 4, 2), memory.dtype)
    for lane in range(LANES):
        g, t = lane >> 2, lane & 3
        for i in range(4):
            out[lane, i] = matrices[i, 2 * t:2 * t + 2, g] if trans else matrices[i, g, 2 * t:2 * t + 2]
    return out


# ---- the kernels' side: shared-memory layout and the addresses each lane computes ---------------------

def swizzled(row, col, d: int):
    """Element offset of (row, col) in a [rows][d] tile stored with 16-byte chunks XOR-swizzled:
    chunk c of row r at chunk c ^ (r % 8) (kernels/common/mma.cuh: swizzled<D>)."""
    row, col = np.asarray(row), np.asarray(col)
    return row * d + (((col >> 3) ^ (row & 7)) << 3) + (col & 7)


def plain(row, col, d: int):
    """Element offset of (row, col) in a row-major [rows][d] tile (attention_03_mma)."""
    return np.asarray(row) * d + np.asarray(col)


def q_fragment_coords(kk: int) -> np.ndarray:
    """(row, col) within the warp's 16 x D slice of Q of each lane's register r of k-chunk kk
    (the first of its two elements): load_q_fragments in attention_mma.cuh. Shape (32, 4, 2)."""
    lane = np.arange(LANES)[:, None]
    g, t, r = lane >> 2, lane & 3, np.arange(4)[None, :]
    return np.stack(np.broadcast_arrays(g + 8 * (r & 1), 16 * kk + 2 * t + 8 * (r >> 1)), axis=-1)


def k_fragment_rows(j: int, kk: int) -> np.ndarray:
    """attention_03: (key, col) of the two 32-bit loads of each lane's B fragment of K (n-tile j, k-chunk kk)."""
    lane = np.arange(LANES)
    g, t = lane >> 2, lane & 3
    return np.stack([np.stack([8 * j + g, 16 * kk + 2 * t + 8 * r], axis=-1) for r in range(2)], axis=1)


def v_fragment_elements(kk: int, n: int) -> np.ndarray:
    """attention_03: (key, col) of the four 16-bit loads of each lane's B fragment of V (k-chunk kk,
    d n-tile n): register r, half h is key 16kk + 2t + 8r + h, column 8n + g. Shape (32, 2, 2, 2)."""
    lane = np.arange(LANES)
    g, t = lane >> 2, lane & 3
    out = np.zeros((LANES, 2, 2, 2), int)
    for r in range(2):
        for h in range(2):
            out[:, r, h] = np.stack([16 * kk + 2 * t + 8 * r + h, 8 * n + g], axis=-1)
    return out


def ldmatrix_rows_k(j: int, kk: int) -> np.ndarray:
    """attention_04/05: (key, col) each lane points ldmatrix.x4 at for K, n-tiles j and j + 1 and
    k-chunk kk: key 8j + lane % 8 + 8 (lane // 16), col 16kk + 8 (lane // 8 % 2). Shape (32, 2)."""
    lane = np.arange(LANES)
    return np.stack([8 * j + (lane & 7) + ((lane >> 4) << 3), 16 * kk + (((lane >> 3) & 1) << 3)], axis=-1)


def ldmatrix_rows_v(kk: int, n: int) -> np.ndarray:
    """attention_04/05: (key, col) each lane points ldmatrix.x4.trans at for V, k-chunk kk and d
    n-tiles n and n + 1: key 16kk + lane % 8 + 8 (lane // 8 % 2), col 8n + 8 (lane // 16)."""
    lane = np.arange(LANES)
    return np.stack([16 * kk + (lane & 7) + (((lane >> 3) & 1) << 3), 8 * n + ((lane >> 4) << 3)], axis=-1)


def p_fragment(s, kk: int) -> np.ndarray:
    """A fragment of keys 16kk .. 16kk+15 of P from the score accumulators s (8, 32, 4), as
    p_fragment in attention_mma.cuh: registers (n-tile 2kk c0 c1), (2kk c2 c3), (2kk+1 c0 c1), (2kk+1 c2 c3)."""
    s = np.asarray(s)
    return np.stack([s[2 * kk][:, 0:2], s[2 * kk][:, 2:4], s[2 * kk + 1][:, 0:2], s[2 * kk + 1][:, 2:4]], axis=1)


def warp_scores(q, k, step: int = 4) -> np.ndarray:
    """One warp's S = Q K^T (q: 16 x D, k: 64 x D) as the kernel of `step` computes it: Q fragments
    from `q_fragment_coords`; K through shared memory (row-major and 32-bit loads for step 3,
    swizzled and ldmatrix for steps 4 and 5); eight n-tiles accumulated over D / 16 k-chunks with
    `mma`. Returns the accumulators (8, 32, 4)."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    d = q.shape[1]
    layout = plain if step == 3 else swizzled
    memory = np.full(KEYS * d, np.nan)
    rows, cols = np.meshgrid(np.arange(KEYS), np.arange(d), indexing="ij")
    memory[layout(rows, cols, d)] = k
    s = np.zeros((8, LANES, 4))
    for kk in range(d // 16):
        at = q_fragment_coords(kk)
        a = np.stack([q[at[..., 0], at[..., 1]], q[at[..., 0], at[..., 1] + 1]], axis=-1)
        for j in range(8):
            if step == 3:
                at_k = k_fragment_rows(j, kk)
                offsets = layout(at_k[..., 0], at_k[..., 1], d)
                b = np.stack([memory[offsets], memory[offsets + 1]], axis=-1)
            else:
                if j % 2:
                    continue
                at_k = ldmatrix_rows_k(j, kk)
                regs = ldmatrix(memory, layout(at_k[:, 0], at_k[:, 1], d))
                s[j + 1] = mma(a, regs[:, 2:4], s[j + 1])
                b = regs[:, 0:2]
            s[j] = mma(a, b, s[j])
    return s


def warp_output(p_scores, v, step: int = 4, o=None) -> np.ndarray:
    """One warp's O += P V (P as score accumulators (8, 32, 4), v: 64 x D) as the kernel of `step`
    does it: A fragments from `p_fragment`, V's B fragments from four 16-bit loads (step 3) or
    ldmatrix.trans of the swizzled tile (steps 4, 5). Returns the accumulators (D / 8, 32, 4)."""
    v = np.asarray(v, np.float64)
    d = v.shape[1]
    layout = plain if step == 3 else swizzled
    memory = np.full(KEYS * d, np.nan)
    rows, cols = np.meshgrid(np.arange(KEYS), np.arange(d), indexing="ij")
    memory[layout(rows, cols, d)] = v
    o = np.zeros((d // 8, LANES, 4)) if o is None else np.array(o, np.float64)
    for kk in range(KEYS // 16):
        a = p_fragment(p_scores, kk)
        for n in range(d // 8):
            if step == 3:
                at = v_fragment_elements(kk, n)
                b = memory[layout(at[..., 0], at[..., 1], d)]
            else:
                if n % 2:
                    continue
                at = ldmatrix_rows_v(kk, n)
                regs = ldmatrix(memory, layout(at[:, 0], at[:, 1], d), trans=True)
                o[n + 1] = mma(a, regs[:, 2:4], o[n + 1])
                b = regs[:, 0:2]
            o[n] = mma(a, b, o[n])
    return o


# ---- shared-memory banks ------------------------------------------------------------------------

BANKS, BANK_BYTES = 32, 4


def wavefronts(byte_addresses, width_bytes: int) -> int:
    """Shared-memory wavefronts of one warp access: lanes in phases of 128 / width (32 for 4-byte or
    narrower accesses, 8 for 16-byte ones; ldmatrix: one phase per matrix), and per phase the largest
    number of distinct 4-byte words that fall in one bank (one word read by several lanes is a broadcast)."""
    addresses = np.asarray(byte_addresses, dtype=np.int64)
    per_phase = LANES if width_bytes <= 4 else 128 // width_bytes
    total = 0
    for start in range(0, LANES, per_phase):
        words = set()
        for address in addresses[start:start + per_phase]:
            first, last = address // BANK_BYTES, (address + width_bytes - 1) // BANK_BYTES
            words.update(range(int(first), int(last) + 1))
        per_bank = np.bincount([w % BANKS for w in words], minlength=BANKS)
        total += int(per_bank.max())
    return total


def tile_wavefronts(step: int, d: int, layout=None) -> dict:
    """Shared-memory accesses one warp makes for one key tile (64 keys) in the kernel of `step`:
    {"instructions": ..., "wavefronts": ...} for the loads of K and of V (from the addresses the
    kernel computes) and for the 16-byte stores of the tile ("stores": the warp's share of them).
    `layout(row, col, d)`: the tile's layout (default: plain for step 3, swizzled for 4 and 5)."""
    layout = layout or (plain if step == 3 else swizzled)
    if step == 3:
        k_ops = [wavefronts(2 * layout(*k_fragment_rows(j, kk)[:, r].T, d), 4)
                 for kk in range(d // 16) for j in range(8) for r in range(2)]
        v_ops = [wavefronts(2 * layout(*v_fragment_elements(kk, n)[:, r, h].T, d), 2)
                 for kk in range(KEYS // 16) for n in range(d // 8) for r in range(2) for h in range(2)]
    else:
        k_ops = [wavefronts(2 * layout(*ldmatrix_rows_k(j, kk).T, d), 16)
                 for kk in range(d // 16) for j in range(0, 8, 2)]
        v_ops = [wavefronts(2 * layout(*ldmatrix_rows_v(kk, n).T, d), 16)
                 for kk in range(KEYS // 16) for n in range(0, d // 8, 2)]
    chunks = d // 8                      # 16-byte chunks per row; thread i stores chunk i % chunks of row i // chunks
    store_ops = []
    for first in range(0, KEYS * chunks, LANES):
        i = first + np.arange(LANES)
        store_ops.append(wavefronts(2 * layout(i // chunks, 8 * (i % chunks), d), 16))
    warps = 8
    return {"K": {"instructions": len(k_ops), "wavefronts": sum(k_ops)},
            "V": {"instructions": len(v_ops), "wavefronts": sum(v_ops)},
            "stores": {"instructions": 2 * len(store_ops) // warps, "wavefronts": 2 * sum(store_ops) // warps}}
