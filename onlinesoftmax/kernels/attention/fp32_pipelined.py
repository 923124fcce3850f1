"""attention_13_fp32_pipelined: attention_01_blocked's float32 forward with its tiles copied by
cp.async one tile ahead and read 16 bytes at a time. Its plan, emulator launch and registration.

The arithmetic is attention_01's (blocked.py's `simulate` is the model of both: key tiles of 64,
scores in float32, the online softmax, one division per row at the end); the kernel's query tiles are
128 rows, its scale is applied to each score and its exponentials are in base 2, which changes only
the rounding. Float32 only, d = 64 or 128, compute capability 8.0 or newer.
"""
from __future__ import annotations

import math

import numpy as np

from onlinesoftmax.kernels.attention import blocked
from onlinesoftmax.registry import Launch, Variant, register
from onlinesoftmax.runtime import driver, emulator
from onlinesoftmax.runtime.loader import KERNELS_DIR, get_kernel

NAME = "attention_13_fp32_pipelined"
ROWS, KEYS, THREADS = 128, 64, 256
SUPPORTED_D = (64, 128)
POISON = np.float32(1.2345e30)   # emulate() fills out and lse with it first: never an answer


def shared_bytes(d: int) -> int:
    """Dynamic shared memory: the Q tile and one K tile in rows of d + 4 floats, two stages of V, P
    transposed in rows of ROWS + 4 floats."""
    return 4 * ((ROWS + KEYS) * (d + 4) + 2 * KEYS * d + KEYS * (ROWS + 4))


def runs_here(d: int, cc: int | None = None) -> bool:
    """The kernel has an entry for d and this GPU (compute capability cc, None: the current one) can run
    it: cp.async (8.0) and a block's opt-in shared memory at least shared_bytes(d) (an A100 has room at
    d = 64 only, sm_86 / sm_89 at neither). What "auto" and the prefill bench ask."""
    from onlinesoftmax.runtime import device

    cc = device.compute_capability() if cc is None else cc
    return d in SUPPORTED_D and cc >= PIPELINED.min_cc and shared_bytes(d) <= device.shared_memory_optin()


def grid(batch: int, heads: int, n_q: int) -> tuple[int, int, int]:
    return math.ceil(n_q / ROWS), heads, batch


def _arguments(heads, kv_heads, n_q, n_k, causal, scale):
    return {5: heads, 6: kv_heads, 7: n_q, 8: n_k, 9: scale * blocked.LOG2E, 10: int(bool(causal))}


def plan(variant: Variant, q, out, k=None, v=None, lse=None, causal=False, scale=1.0):
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    launch = driver.prepare_launch(
        get_kernel(variant.path, f"{NAME}_f32_d{d}"), grid(batch, heads, n_q), (THREADS,), shared_bytes(d), 1,
        (blocked.POINTER,) * 5 + (blocked.INT,) * 4 + (blocked.FLOAT, blocked.INT),
        fixed=_arguments(heads, kv_heads, n_q, n_k, causal, scale))

    def run(q, out, k=None, v=None, lse=None, **_):
        launch(q.data.ptr, k.data.ptr, v.data.ptr, out.data.ptr, None if lse is None else lse.data.ptr)
    return run


def emulate(q, k, v, causal: bool = False, scale: float | None = None, *, source: str | None = None,
            optimize: str = "-O2", schedule: str = "random", seed: int = 1):
    """(out, lse) of one launch of the kernel's own CUDA source (or `source` in its place) on the CPU
    emulator, with the plan's grid, block, shared memory and arguments, isolated in a child process;
    q (batch, heads, n_q, d), k and v (batch, kv_heads, n_k, d) float32 numpy arrays.
    EmulatorFault when the emulator stops the launch or outputs are left unwritten."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    if any(a.dtype != np.float32 for a in (q, k, v)) or d not in SUPPORTED_D:
        raise ValueError(f"{NAME} takes float32 q, k, v with d in {SUPPORTED_D}, got "
                         f"{q.dtype.name}, {k.dtype.name}, {v.dtype.name} with d = {d}")
    entry = f"{NAME}_f32_d{d}"
    module = emulator.Module(KERNELS_DIR / "attention" / f"{NAME}.cu", [entry], source=source, optimize=optimize,
                             schedule=schedule, seed=seed)
    out = np.full(q.shape, POISON, np.float32)
    lse = np.full(q.shape[:3], POISON, np.float32)
    scale = 1 / math.sqrt(d) if scale is None else scale
    args = _arguments(heads, kv_heads, n_q, n_k, causal, scale)
    module.launch(entry, grid(batch, heads, n_q), (THREADS,),
                  (*(np.ascontiguousarray(a) for a in (q, k, v)), out, lse,
                   *(np.int32(args[i]) for i in (5, 6, 7, 8)), np.float32(args[9]), np.int32(args[10])),
                  shared_bytes(d), isolated=True)
    unwritten = int((out == POISON).sum())
    if unwritten:
        raise emulator.EmulatorFault(f"{NAME}.cu left {unwritten} of {out.size} outputs unwritten")
    return out, lse


def geometry(n_q: int, n_k: int) -> Launch:
    """One head's launch (the grid grows by heads and batch), at d = 128."""
    return Launch(grid=(math.ceil(n_q / ROWS),), block=(THREADS,), shared_bytes=shared_bytes(128))


PIPELINED = register(Variant(
    name=NAME, family="attention", file=f"attention/{NAME}.cu", short="fp32_pipelined",
    story="attention_01's float32 loop fed for speed: K and V copied by cp.async a tile ahead, natural layouts "
          "read 16 bytes at a time",
    geometry=geometry, simulate=blocked.simulate, plan=plan, reads_per_element=1, writes_per_element=1,
    dtypes=("float32",), entry=f"{NAME}_f32_d128",
    entries=lambda variant: tuple(f"{NAME}_f32_d{d}" for d in SUPPORTED_D), min_cc=80,
    shared_bytes=shared_bytes))


# --- what one key tile costs a warp, counted from the two kernels' addresses ------------------------

def warp_tile_costs(name: str, d: int) -> dict:
    """Per warp and key tile of 64 keys, for attention_01_blocked or this kernel: {"ffma": FMA
    instructions, "lds": shared-memory load instructions, "wavefronts": {part: count}} with the parts
    "S" (Q and K reads), "PV" (P and V reads), "stores" (P, and the tile's K and V: attention_01's
    register stores, this kernel's cp.async writes). Wavefronts come from the addresses each
    kernel's index arithmetic gives warp 0 (mma_fragments.wavefronts: 16-byte accesses in phases of
    8 lanes)."""
    from onlinesoftmax.kernels.attention import mma_fragments as mf

    lane = np.arange(32)
    tx, ty = lane % 16, lane // 16
    word = 4
    if name == blocked.NAME:                  # Qt[d][LD], Kt[d][LD], Vs[j][d], Pt[j][LD]; LD = 68
        ld = blocked.BLOCK_Q + 4
        s_step = mf.wavefronts(word * 4 * ty, 16) + mf.wavefronts(word * 4 * tx, 16)        # per element of d
        pv_key = mf.wavefronts(word * 4 * ty, 16) + sum(mf.wavefronts(word * (tx + 16 * c), 4) for c in range(d // 16))
        element = lane                       # one store instruction of the loading loop: i = threadIdx + 256 it
        k_store = mf.wavefronts(word * ((element % d) * ld + element // d), 4)
        v_store = mf.wavefronts(word * ((element // d) * d + element % d), 4)
        p_store = sum(mf.wavefronts(word * ((4 * tx + j) * ld + 4 * ty + i), 4) for i in range(4) for j in range(4))
        stores_per_thread = 64 * d // 256    # elements of K (and of V) each thread stores per tile
        return {"ffma": 32 * d, "lds": 2 * d + 64 * (1 + d // 16),
                "wavefronts": {"S": d * s_step, "PV": 64 * pv_key,
                               "stores": stores_per_thread * (k_store + v_store) + p_store}}
    if name == NAME:                          # Q[r][d + 4], K[j][d + 4], V[j][d], Pt[j][ROWS + 4]
        ld, ldp = d + 4, ROWS + 4
        s_step = sum(mf.wavefronts(word * ((8 * ty + i) * ld), 16) for i in range(8)) + \
            sum(mf.wavefronts(word * ((tx + 16 * j) * ld), 16) for j in range(4))               # per 4 elements of d
        pv_key = sum(mf.wavefronts(word * (8 * ty + h), 16) for h in (0, 4)) + \
            sum(mf.wavefronts(word * 4 * (tx + 16 * g), 16) for g in range(d // 64))
        p_store = sum(mf.wavefronts(word * ((tx + 16 * j) * ldp + 8 * ty + h), 16) for j in range(4) for h in (0, 4))
        copies = 2 * KEYS * d * word // 128 // (THREADS // 32)   # K and V bytes a tile, a warp's share, in wavefronts
        return {"ffma": 64 * d, "lds": 3 * d + KEYS * (2 + d // 64),
                "wavefronts": {"S": d // 4 * s_step, "PV": KEYS * pv_key, "stores": p_store + copies}}
    raise ValueError(f"warp_tile_costs: {name!r} is neither {blocked.NAME!r} nor {NAME!r}")


FFMA_PER_CLOCK, WAVEFRONTS_PER_CLOCK = 4, 1   # warp instructions per SM and clock: four FMA pipes, one shared port


def shared_memory_cap(name: str, d: int) -> float:
    """The largest fraction of the FMA peak shared memory lets the kernel reach: one wavefront a clock
    against four FMA warp-instructions a clock, per SM."""
    costs = warp_tile_costs(name, d)
    per_ffma = sum(costs["wavefronts"].values()) / costs["ffma"]
    return min(1.0, WAVEFRONTS_PER_CLOCK / (FFMA_PER_CLOCK * per_ffma))
