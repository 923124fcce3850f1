"""The GPU primer's diagrams and its two small models (chapters/00_gpu_primer.md).

Every drawing function returns a matplotlib figure built from patches and lines, no image files.
Drawn elements carry a gid ("lane", "block", "level", "segment") so tests can count them.
`butterfly_reduce` emulates a warp's `__shfl_xor_sync` reduction in NumPy; `machine()` gives the
numbers the page quotes: live on a GPU, from the recorded H200 run otherwise.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from onlinesoftmax.book.readings.figures import color

LANES = 32                              # threads in a warp (a definition of the hardware)
BUTTERFLY_OFFSETS = (16, 8, 4, 2, 1)    # the xor offsets of a 32-lane butterfly
SEGMENT_BYTES = 128                     # one memory transaction of a warp's coalesced 4-byte loads
# NVIDIA's per-SM limits for compute capability 9.0 (CUDA C++ Programming Guide, technical specifications)
HOPPER_SM_LIMITS = {"registers_32bit": 65536, "shared_KB": 228, "threads": 2048, "blocks": 32}


def machine() -> dict:
    """SM count, L2 bytes, copy bandwidth (GB/s, bytes read + written) and per-SM limits, with their source.

    On a GPU: the device's attributes and a copy measured now. Without one: the newest recorded
    `softmax-fast` run (its meta block and its large device-to-device copy)."""
    from onlinesoftmax.runtime import device

    if device.has_gpu():
        import cupy

        from onlinesoftmax.measure import timer

        gpu = cupy.cuda.Device()
        attributes, name = gpu.attributes, cupy.cuda.runtime.getDeviceProperties(gpu.id)["name"]
        limits = {"registers_32bit": attributes["MaxRegistersPerMultiprocessor"],
                  "shared_KB": attributes["MaxSharedMemoryPerMultiprocessor"] / 1024,
                  "threads": attributes["MaxThreadsPerMultiProcessor"]}
        copy = timer.copy_bandwidth(nbytes=2**30)
        return {"sm_count": device.sm_count(), "l2_bytes": timer.l2_bytes(), "copy_GBps": copy["GBps"],
                "sm_limits": limits, "gpu": name.decode() if isinstance(name, bytes) else name,
                "source": "measured live on this GPU", "live": True}
    from onlinesoftmax.measure import results

    data = results.load_recorded("softmax-fast")
    copies = [row["GBps"] for row in data["rows"] if row.get("kernel") == "copy"]
    return {"sm_count": data["meta"]["sm_count"], "l2_bytes": data["meta"]["l2_bytes"],
            "copy_GBps": float(np.median(copies)), "sm_limits": dict(HOPPER_SM_LIMITS),
            "gpu": data["meta"]["gpu"], "source": results.provenance(data["meta"]), "live": False}


def _box(ax, x, y, w, h, text="", face="white", gid=None, fontsize=8, **kw):
    """A labelled rectangle; returns the patch."""
    patch = Rectangle((x, y), w, h, facecolor=face, edgecolor="black", linewidth=0.8, **kw)
    if gid:
        patch.set_gid(gid)
    ax.add_patch(patch)
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)
    return patch


def _blank(ax, xlim, ylim, title):
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)


def draw_execution_model(n_warps: int = 4, n_blocks: int = 12, n_sms: int = 4):
    """Left: one SM running `n_warps` warps of 32 lanes, with its registers and shared memory.
    Right: a grid of `n_blocks` blocks (block r handles row r of a softmax) spread over `n_sms` SMs."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1.25, 1]})
    _blank(left, (-1, 35), (-3.5, n_warps * 2 + 3), f"one SM running a block of {n_warps} warps")
    _box(left, -0.5, -3, 34.5, n_warps * 2 + 5, face="#f4f4f4")
    for w in range(n_warps):
        y = n_warps * 2 - 2 * w
        left.text(0, y + 0.5, f"warp {w}", ha="left", va="center", fontsize=8)
        for lane in range(LANES):
            _box(left, 3 + lane * 0.95, y, 0.8, 1, face=color("softmax_02_online"), gid="lane",
                 alpha=0.35 + 0.65 * (lane % 2))
    left.text(3, n_warps * 2 + 1.4, "lanes 0 … 31 of each warp run the same instruction", fontsize=8, va="center")
    _box(left, 0.5, -2.6, 16, 1.6, "registers (private to each lane)", face="#fff2cc")
    _box(left, 17.5, -2.6, 15.5, 1.6, "shared memory (one per block)", face="#d9ead3")
    _blank(right, (-0.5, n_sms * 2.6 + 4.5), (-1, n_blocks / 2 + 2.5), "a grid of blocks, one per row")
    for r in range(n_blocks):
        _box(right, 0, n_blocks / 2 - r / 2, 3, 0.42, f"row {r} → block {r}", gid="block", fontsize=7)
    for s in range(n_sms):
        x = 4.5 + s * 2.6
        _box(right, x, -0.6, 2.2, n_blocks / 2 + 1.5, face="#f4f4f4")
        right.text(x + 1.1, n_blocks / 2 + 1.2, f"SM {s}", ha="center", fontsize=8)
        for k, r in enumerate(range(s, n_blocks, n_sms)):
            _box(right, x + 0.2, n_blocks / 2 - 0.4 - k * 0.9, 1.8, 0.7, f"block {r}", face="#cfe2f3", fontsize=7)
    fig.tight_layout()
    return fig


def draw_memory_hierarchy(levels: list[tuple[str, str]]):
    """A pyramid, fastest and smallest on top: `levels` is [(name, description)], top first."""
    fig, ax = plt.subplots(figsize=(9, 0.9 * len(levels) + 0.8))
    _blank(ax, (-6, 6), (-0.2, len(levels) + 0.2), "the memory hierarchy: each level slower than the one above")
    ax.set_aspect("auto")
    shades = ["#fff2cc", "#d9ead3", "#cfe2f3", "#ead1dc", "#eeeeee"]
    for i, (name, description) in enumerate(levels):
        width = 3 + 8 * i / max(1, len(levels) - 1)
        y = len(levels) - 1 - i
        _box(ax, -width / 2, y + 0.05, width, 0.9, f"{name}\n{description}", face=shades[i % len(shades)],
             gid="level", fontsize=8)
    fig.tight_layout()
    return fig


def segments_touched(stride: int, lanes: int = LANES, element_bytes: int = 4, segment_bytes: int = SEGMENT_BYTES) -> int:
    """Aligned segments (128-byte lines, or 32-byte sectors with segment_bytes=32) that a warp
    touches when lane i reads the `element_bytes` at element i * stride."""
    first = np.arange(lanes) * stride * element_bytes
    last = first + element_bytes - 1
    return len(np.unique(np.concatenate([first // segment_bytes, last // segment_bytes])))


def draw_coalescing(strides=(1, 32)):
    """For each stride: 32 lanes on top, memory below cut into 128-byte segments, an arrow per load;
    segments that must be fetched are shaded."""
    fig, axes = plt.subplots(len(strides), 1, figsize=(12, 2.3 * len(strides)), squeeze=False)
    for ax, stride in zip(axes[:, 0], strides):
        n_segments = max(segments_touched(stride), 4)
        span = n_segments * SEGMENT_BYTES
        scale = 32.0 / span                                # bytes -> drawing units
        _blank(ax, (-1, 33), (-1.6, 3.4), f"stride {stride}: {segments_touched(stride)} line(s) of 128 bytes")
        ax.set_aspect("auto")
        touched = set((np.arange(LANES) * stride * 4 // SEGMENT_BYTES).tolist())
        for s in range(n_segments):
            _box(ax, s * SEGMENT_BYTES * scale, -1, SEGMENT_BYTES * scale, 0.8, gid="segment",
                 face="#f4cccc" if s in touched else "white")
        for lane in range(LANES):
            _box(ax, lane, 2.2, 0.8, 0.8, gid="lane", face=color("softmax_02_online"), alpha=0.6)
            target = (lane * stride * 4 + 2) * scale
            ax.add_patch(FancyArrowPatch((lane + 0.4, 2.2), (target, -0.2), arrowstyle="-|>",
                                         mutation_scale=6, linewidth=0.5, color="#444444"))
        ax.text(-0.8, 2.6, "lanes", ha="right", va="center", fontsize=8)
        ax.text(-0.8, -0.6, "memory", ha="right", va="center", fontsize=8)
    fig.tight_layout()
    return fig


def butterfly_reduce(values, op=np.maximum, offsets=BUTTERFLY_OFFSETS) -> np.ndarray:
    """What every lane holds after a butterfly: at each offset, lane i combines its value with the
    value of lane i ^ offset (what `__shfl_xor_sync(0xffffffff, v, offset)` returns to lane i)."""
    held = np.asarray(values).copy()
    assert held.shape == (LANES,), "one value per lane"
    lane = np.arange(LANES)
    for offset in offsets:
        partner = held[lane ^ offset]                      # every lane reads at once, then writes
        held = op(held, partner)
    return held


def draw_butterfly(offsets=BUTTERFLY_OFFSETS):
    """32 lanes (rows) across len(offsets) + 1 columns; a line joins lane i and lane i ^ offset at
    each stage. After the last stage every lane holds the reduction of all 32."""
    fig, ax = plt.subplots(figsize=(9, 7))
    stages = len(offsets)
    for stage, offset in enumerate(offsets):
        for lane in range(LANES):
            partner = lane ^ offset
            if partner > lane:
                ax.plot([stage, stage + 1], [lane, partner], color="#888888", linewidth=0.5, label="_")
                ax.plot([stage, stage + 1], [partner, lane], color="#888888", linewidth=0.5, label="_")
        ax.text(stage + 0.5, -1.6, f"xor {offset}", ha="center", fontsize=9)
    for stage in range(stages + 1):
        for lane in range(LANES):
            dot = Rectangle((stage - 0.12, lane - 0.3), 0.24, 0.6, facecolor=color("softmax_02_online"),
                            edgecolor="none")
            dot.set_gid("lane")
            ax.add_patch(dot)
    ax.set_xlim(-0.5, stages + 0.5)
    ax.set_ylim(LANES, -2.5)
    ax.set_yticks(range(0, LANES, 4))
    ax.set_ylabel("lane")
    ax.set_xticks(range(stages + 1))
    ax.set_xticklabels(["start"] + [f"after {k + 1}" for k in range(stages)])
    ax.set_title(f"warp butterfly: {stages} shuffles; after the last, every lane holds the whole warp's result",
                 fontsize=10)
    fig.tight_layout()
    return fig


def draw_littles_law(per_sm_GBps: float, latency_ns: float, max_KB: float = 32.0):
    """Throughput one SM can sustain against the bytes it keeps in flight: in flight / latency,
    capped at its share of the copy rate. The knee is bandwidth x latency (Little's law)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    in_flight_KB = np.linspace(0, max_KB, 200)
    achievable = np.minimum(in_flight_KB * 1e3 / latency_ns, per_sm_GBps)   # bytes/ns = GB/s
    ax.plot(in_flight_KB, achievable, color=color("softmax_02_online"), label="reads an SM can sustain")
    ax.axhline(per_sm_GBps, color=color("copy"), linestyle="--", linewidth=1, label="copy rate per SM (reads)")
    knee_KB = per_sm_GBps * latency_ns / 1e3
    ax.axvline(knee_KB, color="#888888", linestyle=":", linewidth=1, label="bandwidth x latency")
    ax.set_xlabel("bytes of loads in flight per SM (KB)")
    ax.set_ylabel("GB/s per SM")
    ax.set_title(f"Little's law at an assumed DRAM latency of {latency_ns:.0f} ns", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def draw_roofline(memory_GBps: float, compute_GFLOPs: float, points: dict[str, float]):
    """Log-log roofline: attainable GFLOP/s = min(compute roof, intensity x memory_GBps).
    `points` maps a kernel's name to its arithmetic intensity (flops per byte)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ridge = compute_GFLOPs / memory_GBps                    # flops per byte where the roofs meet
    low, high = np.logspace(-2, np.log10(ridge), 100), np.logspace(np.log10(ridge), 3, 100)
    ax.loglog(low, low * memory_GBps, color=color("copy"), linestyle="--",
              label="copy ceiling x intensity (memory roof)")
    ax.loglog(high, np.full_like(high, compute_GFLOPs), color="#888888", linestyle="-.",
              label="FP32 peak, NVIDIA's figure (compute roof)")
    for name, flops_per_byte in points.items():
        attainable = min(compute_GFLOPs, flops_per_byte * memory_GBps)
        ax.loglog([flops_per_byte], [attainable], "o", color=color("softmax_02_online"), label=name)
    ax.axvline(ridge, color="#bbbbbb", linewidth=0.8, label="ridge point")
    ax.set_xlabel("arithmetic intensity (flops per byte of DRAM traffic)")
    ax.set_ylabel("attainable GFLOP/s")
    ax.set_title("the roofline", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
