"""The tiles of the blocked attention forward, drawn from the kernel's own constants.

`kernel_tiles()` reads BLOCK_Q and BLOCK_K from kernels/attention/attention_01_blocked.cu (its
#defines), so that a figure cannot drift from the kernel; `visited_tiles` is the kernel's loop
bound per query tile (the first key no row of the tile can see, causal aligned bottom-right);
`tile_figure` draws the score matrix of one (batch, head) cut into those tiles: the query tile one
thread block owns, the key/value tiles that stream past it in order, the tiles a causal kernel never
loads, and where each piece of state lives. tests/test_attention_tiles.py checks the three against
the launcher (onlinesoftmax/kernels/attention/blocked.py).
"""
from __future__ import annotations

import math
import re

from onlinesoftmax.runtime.loader import KERNELS_DIR

SOURCE = KERNELS_DIR / "attention" / "attention_01_blocked.cu"


def defines(source, names) -> dict:
    """{name: value} of the integer #defines `names` in the file `source` (so a figure reads the kernel)."""
    text = source.read_text()
    return {name: int(re.search(rf"^#define {name} (\d+)", text, re.M).group(1)) for name in names}


def kernel_tiles(source=SOURCE) -> dict:
    """{"BLOCK_Q": rows of a query tile, "BLOCK_K": keys of a key/value tile}, from the kernel source."""
    return defines(source, ("BLOCK_Q", "BLOCK_K"))


def visited_tiles(n_q: int, n_k: int, causal: bool, block_q: int, block_k: int) -> list[int]:
    """Key tiles each query tile loads: all of them, or (causal, bottom-right) up to the first key its
    last row cannot see."""
    counts = []
    for q0 in range(0, n_q, block_q):
        last_row = min(q0 + block_q, n_q) - 1
        kv_end = min(n_k, last_row + 1 + n_k - n_q) if causal else n_k
        counts.append(math.ceil(max(kv_end, 0) / block_k))
    return counts


def tile_figure(n_q: int = 256, n_k: int = 384, causal: bool = True, owner: int = 2, tiles: dict | None = None):
    """The score matrix (n_q x n_k) cut into the kernel's tiles; query tile `owner` is the one block
    drawn in detail. Returns (figure, what was drawn: the tile sizes, the visited counts)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    tiles = tiles or kernel_tiles()
    bq, bk = tiles["BLOCK_Q"], tiles["BLOCK_K"]
    visited = visited_tiles(n_q, n_k, causal, bq, bk)
    fig, ax = plt.subplots(figsize=(8.6, 4.2))
    kinds = (f"key/value tiles of query tile {owner}, in the order they stream",
             "tiles loaded by the other query tiles' blocks", "never loaded (causal)")
    labelled = set()
    for i, count in enumerate(visited):
        for j in range(math.ceil(n_k / bk)):
            x0, y0 = j * bk, i * bq
            w, h = min(bk, n_k - x0), min(bq, n_q - y0)
            loaded = j < count
            mine = i == owner
            face = ("#3182bd" if mine else "#9ecae1") if loaded else "white"
            kind = (kinds[0] if mine else kinds[1]) if loaded else kinds[2]
            ax.add_patch(Rectangle((x0, y0), w, h, facecolor=face, edgecolor="#636363", lw=0.6,
                                  hatch=None if loaded else "////", label=kind if kind not in labelled else "_nolegend_"))
            labelled.add(kind)   # (the legend shows each kind of tile once, drawn as its tiles are)
            if mine and loaded:
                ax.text(x0 + w / 2, y0 + h / 2, f"K{j}, V{j}\nstep {j + 1}", ha="center", va="center", fontsize=7,
                        color="white")
    if causal:   # the visible region's edge: row i sees keys j <= i + n_k - n_q
        ax.plot([n_k - n_q, n_k], [0, n_q], color="#e6550d", lw=1.2, label="last visible key of each row")
    ax.set_xlim(0, n_k)
    ax.set_ylim(n_q, 0)
    ax.set_aspect("equal")
    ax.set_xlabel(f"keys (tiles of BLOCK_K = {bk}, streamed through shared memory)")
    ax.set_ylabel(f"queries (tiles of BLOCK_Q = {bq})")
    y_owner = owner * bq + min(bq, n_q - owner * bq) / 2
    ax.annotate(f"one thread block: query tile {owner}\nQ tile in shared memory;\nm, l and O of its {bq} rows\n"
                "in registers (4 rows per thread)", xy=(n_k, y_owner), xytext=(n_k * 1.04, y_owner),
                fontsize=7.5, va="center", annotation_clip=False, arrowprops={"arrowstyle": "-", "lw": 0.6})
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=7.5, frameon=False)
    ax.set_title(f"{'causal' if causal else 'full'} attention, n_q = {n_q}, n_k = {n_k}: "
                 f"{sum(visited)} of {len(visited) * math.ceil(n_k / bk)} tiles loaded", fontsize=9)
    fig.tight_layout()
    return fig, {"BLOCK_Q": bq, "BLOCK_K": bk, "visited": visited}


# ---- the tensor-core kernels (attention_03 .. 07): one block's warps and their fragments ---------------

MMA_HEADER = KERNELS_DIR / "common" / "attention_mma.cuh"
MMA_NAMES = ("MMA_BLOCK_Q", "MMA_BLOCK_K", "MMA_WARPS", "MMA_WARP_ROWS")
MMA_N = 8   # keys (or output columns) of one m16n8 accumulator


def mma_tiles(source=MMA_HEADER) -> dict:
    """The block and warp geometry the tensor-core kernels share, read from attention_mma.cuh's #defines."""
    return defines(source, MMA_NAMES)


def mma_tile_figure(d: int = 128, owner: int = 2, tiles: dict | None = None):
    """One block of the tensor-core kernels at one key tile: its query rows cut into the warps' strips,
    each strip's scores S (BLOCK_K keys) and output O (d columns) cut into the m16n8 accumulators the
    warp holds in registers; warp `owner`'s accumulators numbered. Returns (figure, what was drawn)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    tiles = tiles or mma_tiles()
    bq, bk, warps, rows = (tiles[n] for n in MMA_NAMES)
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 4.6), gridspec_kw={"width_ratios": [bk, d]})
    kinds = ("a warp's strip: its rows for the whole loop", f"warp {owner}'s accumulators, one mma result each",
             "rows past the block's warps")
    labelled, drawn = set(), {"strips": 0, "s_accumulators": 0, "o_accumulators": 0}
    for ax, width, what in ((axes[0], bk, "s"), (axes[1], d, "o")):
        for w in range(warps):
            y0 = w * rows
            mine = w == owner
            for c in range(0, width, MMA_N):
                kind = kinds[1] if mine else kinds[0]
                ax.add_patch(Rectangle((c, y0), MMA_N, rows, facecolor="#3182bd" if mine else ("#c6dbef", "#9ecae1")[w % 2],
                                       edgecolor="white" if mine else "none", lw=0.8,
                                       label=kind if kind not in labelled else "_nolegend_"))
                labelled.add(kind)
                drawn[f"{what}_accumulators"] += mine
                if mine and what == "s":
                    ax.text(c + MMA_N / 2, y0 + rows / 2, str(c // MMA_N), ha="center", va="center", fontsize=6.5,
                            color="white")
            if what == "s":
                ax.text(-1, y0 + rows / 2, f"warp {w}: rows {y0}-{y0 + rows - 1}", ha="right", va="center", fontsize=7)
            drawn["strips"] += what == "s"
        if warps * rows < bq:
            ax.add_patch(Rectangle((0, warps * rows), width, bq - warps * rows, facecolor="white", hatch="////",
                                   edgecolor="#636363", label=kinds[2] if kinds[2] not in labelled else "_nolegend_"))
            labelled.add(kinds[2])
        ax.set_xlim(0, width)
        ax.set_ylim(bq, 0)
        ax.set_aspect("equal")
        ax.set_yticks([])
        ax.tick_params(labelsize=7)
    axes[0].set_title(f"S = Q K_j^T of key tile j: {bq} x {bk}\n(registers, recomputed each tile)", fontsize=8.5)
    axes[0].set_xlabel(f"keys of the tile (K_j, V_j: {bk} x d in shared memory)", fontsize=8)
    axes[1].set_title(f"O, unnormalized: {bq} x d = {d}\n(registers, the whole loop; m and l beside it)", fontsize=8.5)
    axes[1].set_xlabel("output columns", fontsize=8)
    fig.legend(loc="lower center", ncol=2, fontsize=7.5, frameon=False)
    fig.suptitle(f"one block of the tensor-core kernels: {bq} query rows, {warps} warps of {rows} (each warp's Q "
                 f"fragments in its registers);\nan accumulator is {rows} rows x {MMA_N} columns", fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig, {**tiles, "d": d, **drawn}
