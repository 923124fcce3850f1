"""Pictures of wgmma's operands, drawn from the layout model (onlinesoftmax/kernels/attention/wgmma_layout.py)
that the CPU emulator and the GPU tests check: `atom_figure` shows one 1024-byte atom of the 128-byte
swizzle (where each 16-byte chunk of 8 rows is stored, and which chunks one k-step reads);
`accumulator_figure` shows which warp and thread of a warpgroup hold each accumulator of a 64 x N
result. Both return (figure, the array drawn), so that tests compare what is drawn with the model.
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax.kernels.attention import wgmma_layout as wl

WARP_COLOURS = ("#3182bd", "#e6550d", "#31a354", "#756bb1")   # warps 0-3 of a warpgroup


def stored_chunks() -> np.ndarray:
    """[8 rows][8 slots]: the logical chunk (16 bytes, 8 elements) of a 64-column row stored in each
    16-byte slot of an atom."""
    offsets = wl.tile_offsets(8, 64)               # byte offset of element (r, c)
    slots = offsets[:, ::8] // 16 % 8              # where chunk c of row r is stored
    stored = np.empty((8, 8), int)
    for r in range(8):
        stored[r, slots[r]] = np.arange(8)
    return stored


def atom_figure(step: int = 1):
    """One atom: row r's 16-byte slots, each labelled with the chunk stored there; the two chunks of
    k-step `step` (columns 16 step .. 16 step + 15) shaded."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    stored = stored_chunks()
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for r in range(8):
        for slot in range(8):
            chunk = stored[r, slot]
            read = chunk // 2 == step
            ax.add_patch(Rectangle((slot, r), 1, 1, facecolor="#fd8d3c" if read else "white", edgecolor="#636363"))
            ax.text(slot + 0.5, r + 0.5, str(chunk), ha="center", va="center", fontsize=9)
    ax.set_xlim(0, 8)
    ax.set_ylim(8, 0)
    ax.set_xticks(np.arange(8) + 0.5, [f"{16 * s}" for s in range(8)])
    ax.set_yticks(np.arange(8) + 0.5, [f"row {r}" for r in range(8)])
    ax.set_xlabel("byte of the 128-byte row where the chunk is stored")
    ax.set_title(f"The 128-byte swizzle: chunk c of row r stored at slot c XOR r; shaded: the chunks "
                 f"k-step {step} reads", fontsize=9)
    fig.tight_layout()
    return fig, stored


def accumulator_owners(n: int = 16) -> np.ndarray:
    """[64][n]: the warpgroup thread holding each accumulator of the first n columns."""
    owners = np.full((64, n), -1)
    for thread in range(wl.WARPGROUP):
        for i in range(n // 2):
            row, col = wl.accumulator_position(thread, i)
            owners[row, col] = thread
    return owners


def accumulator_figure(n: int = 16, rows: int = 32):
    """Which thread holds each accumulator of the first `rows` rows and n columns of a 64 x N result:
    the rows of warp w (16w .. 16w + 15) in its colour, each cell labelled with the lane."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    owners = accumulator_owners(n)
    fig, ax = plt.subplots(figsize=(7.2, 0.16 * rows + 1.2))
    for row in range(rows):
        for col in range(n):
            thread = owners[row, col]
            ax.add_patch(Rectangle((col, row), 1, 1, facecolor=WARP_COLOURS[thread // 32], alpha=0.35,
                                   edgecolor="white", lw=0.3))
            ax.text(col + 0.5, row + 0.5, str(thread % 32), ha="center", va="center", fontsize=6)
    ax.set_xlim(0, n)
    ax.set_ylim(rows, 0)
    ax.set_xlabel("column of D (key or output column)")
    ax.set_ylabel("row of D (query row of the warpgroup)")
    for w, colour in enumerate(WARP_COLOURS[: (rows + 15) // 16]):
        ax.add_patch(Rectangle((0, 0), 0, 0, facecolor=colour, alpha=0.35, label=f"warp {w}"))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    ax.set_title("Accumulators of a warpgroup: each cell labelled with the lane that holds it", fontsize=9)
    fig.tight_layout()
    return fig, owners
