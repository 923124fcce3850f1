"""What each lane of a warp holds after the (m, l) butterfly, as the compiled kernel computes it.

nvcc (and NVRTC) contract `a.l * ea + b.l * eb` in `online_combine` into one FMUL and one FFMA:
one product is rounded to fp32, the other is fused into the add and never rounded. Which one is
fused is fixed by the code, so in the two lanes of a pair it is a different product, and the two
lanes can round differently. The NumPy model (`simulate.online_combine`) rounds both products and
cannot show this; `butterfly_lanes` does, with an exact emulation of the FFMA.

On a GPU, `gpu_butterfly_lanes` runs the real `online_warp_reduce` of kernels/common/online_state.cuh,
compiled with or without `--fmad=false`.
"""
from __future__ import annotations

import re

import numpy as np

F32 = np.float32
WARP = 32


def fma_f32(a, b, c) -> np.ndarray:
    """a * b + c for fp32 arrays with a single rounding to fp32, as the FFMA instruction does.

    a * b is exact in float64 (24 + 24 bits < 53); the float64 sum s = a * b + c may round, but
    TwoSum gives its exact error. Rounding s to fp32 is then wrong only when s lies exactly halfway
    between two fp32 numbers and the error is not zero: the error then says which way to go.
    """
    a, b, c = (np.asarray(v, dtype=F32).astype(np.float64) for v in (a, b, c))
    product = a * b
    s = product + c
    bb = s - product
    error = (product - (s - bb)) + (c - bb)               # TwoSum: s + error == a * b + c exactly
    rounded = s.astype(F32)
    with np.errstate(invalid="ignore"):
        wide = rounded.astype(np.float64)
        beyond = np.nextafter(rounded, np.where(s > wide, np.inf, -np.inf).astype(F32))  # other side of s
        tie = (error != 0) & (s != wide) & (s - wide == beyond.astype(np.float64) - s)
        exact = np.where(error > 0, np.maximum(rounded, beyond), np.minimum(rounded, beyond))
        return np.where(tie, exact, rounded).astype(F32)


def combine_contracted(own, partner, guards: bool = True):
    """online_combine as the compiled kernel computes it in one lane: the partner's product rounded
    by an FMUL, the lane's own product fused into the FFMA (the order read from the SASS)."""
    (m1, l1), (m2, l2) = own, partner
    m = np.fmax(m1, m2)
    base = np.where(m == -np.inf, F32(0), m) if guards else m
    with np.errstate(invalid="ignore", over="ignore"):
        e1, e2 = np.exp((m1 - base).astype(F32)), np.exp((m2 - base).astype(F32))
        return m, fma_f32(l1, e1, (l2 * e2).astype(F32))


def butterfly_lanes(m, l, contract: bool = True):
    """(m, l) of every lane after the xor butterfly over offsets 16 .. 1; inputs (warps, 32) fp32.

    contract=True: FMUL + FFMA as nvcc emits by default; False: two rounded products and a rounded
    add (`--fmad=false`, and the NumPy model)."""
    from onlinesoftmax import simulate

    lanes = np.arange(WARP)
    state = (np.asarray(m, F32), np.asarray(l, F32))
    for offset in (16, 8, 4, 2, 1):
        partner = tuple(s[..., lanes ^ offset] for s in state)
        state = combine_contracted(state, partner) if contract else simulate.online_combine(state, partner)
    return state


def random_warps(n_warps: int, seed: int = 0):
    """(m, l) states for n_warps warps of 32 lanes: m ~ N(0, 4), l ~ U(1, 30), fp32."""
    rng = np.random.default_rng(seed)
    m = rng.normal(0, 4, (n_warps, WARP)).astype(F32)
    l = rng.uniform(1, 30, (n_warps, WARP)).astype(F32)
    return m, l


def disagreeing_warps(l) -> float:
    """Fraction of warps (rows of `l`) whose 32 lanes do not all hold the same bits."""
    l = np.asarray(l)
    return float((l != l[:, :1]).any(axis=1).mean())


def ulps_apart(l) -> int:
    """The largest distance, in fp32 units in the last place, between two lanes of one warp."""
    bits = np.asarray(l, F32).view(np.int32).astype(np.int64)
    return int((bits.max(axis=1) - bits.min(axis=1)).max())


_GPU_SOURCE = """
#line 1 "butterfly_lanes"
extern "C" __global__ void butterfly_lanes(const float* m, const float* l, float* m_out, float* l_out) {
    const int i = blockIdx.x * 32 + threadIdx.x;   // one warp per block, one state per lane
    OnlineState s = {m[i], l[i]};
    s = online_warp_reduce(s);
    m_out[i] = s.m;
    l_out[i] = s.l;
}
"""


def gpu_butterfly_lanes(m, l, fmad: bool = True):
    """The real online_warp_reduce on the GPU, built by NVRTC with --fmad=true (the default) or
    false; returns (m, l) of every lane as host arrays shaped like the inputs."""
    import cupy

    from onlinesoftmax.runtime.loader import COMPILE_OPTIONS, KERNELS_DIR, expand_source

    header, _ = expand_source(KERNELS_DIR / "common" / "online_state.cuh")
    module = cupy.RawModule(code=header + _GPU_SOURCE,
                            options=COMPILE_OPTIONS + (f"--fmad={'true' if fmad else 'false'}",))
    kernel = module.get_function("butterfly_lanes")
    m_dev, l_dev = cupy.asarray(m, dtype=cupy.float32), cupy.asarray(l, dtype=cupy.float32)
    m_out, l_out = cupy.empty_like(m_dev), cupy.empty_like(l_dev)
    kernel((m_dev.shape[0],), (WARP,), (m_dev, l_dev, m_out, l_out))
    return cupy.asnumpy(m_out), cupy.asnumpy(l_out)


_REGISTER_FFMA = re.compile(r"^FFMA R\d+, R\d+, R\d+, R\d+")


def combine_instructions(sass_text: str, count: int = 8) -> list[tuple[str, str]]:
    """The first butterfly step's shuffles and its combine's multiplies in a SASS listing: the
    SHFL.BFLY, FMUL and register-only FFMA (the exponentials' own FFMAs with constants left out)."""
    from onlinesoftmax.runtime import disasm

    found = []
    for address, text in disasm.instructions(sass_text, ("SHFL", "FMUL", "FFMA")):
        if not found and not text.startswith("SHFL.BFLY"):
            continue
        if text.startswith(("SHFL", "FMUL")) or _REGISTER_FFMA.match(text):
            found.append((address, text.rstrip(" ;")))
        if len(found) == count:
            break
    return found


def contraction(sass_text: str) -> dict | None:
    """The combine's FFMA in the first butterfly step and where its operands come from:
    {"ffma", "fmul", "shfl"} instruction texts (fmul: the last FMUL before the FFMA that writes its
    addend, the partner's l times its exponential; shfl: the shuffle that brings that l), or None
    when the listing does not have that shape (the lane's own l a factor of the FFMA, the
    partner's not)."""
    def ops(text):
        return text.replace(",", "").split()
    listing = [text for _, text in combine_instructions(sass_text, count=40)]
    at = next((i for i, text in enumerate(listing) if _REGISTER_FFMA.match(text)), None)
    if at is None:
        return None
    ffma = listing[at]
    fmul = next((text for text in reversed(listing[:at]) if text.startswith("FMUL") and ops(text)[1] == ops(ffma)[4]),
                None)
    if fmul is None:
        return None
    shfl = next((text for text in listing[:at] if text.startswith("SHFL.BFLY") and ops(text)[2] in ops(fmul)[2:4]),
                None)
    if shfl is None or ops(shfl)[3] not in ops(ffma)[2:4] or ops(shfl)[2] in ops(ffma)[2:4]:
        return None
    return {"ffma": ffma, "fmul": fmul, "shfl": shfl}


# Chapter 3's counter-example to a merged wide load: two adjacent 32-bit words per thread (two
# halves each, as two half2 values would be), through a pointer that promises 4-byte alignment.
TWO_WORDS_SOURCE = r"""extern "C" __global__ void two_words(const unsigned int* __restrict__ x,
                                     unsigned int* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (2 * i + 1 < n) y[i] = x[2 * i] ^ x[2 * i + 1];   // words 2i and 2i + 1: 8 adjacent bytes
}
"""


def two_words_sass() -> str:
    """cuobjdump -sass of TWO_WORDS_SOURCE, compiled by nvcc as the book's kernels are
    (disasm.ToolMissing without nvcc)."""
    import tempfile
    from pathlib import Path

    from onlinesoftmax.runtime import disasm

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "two_words.cu"
        source.write_text(TWO_WORDS_SOURCE)
        return disasm.sass(source, "two_words")
