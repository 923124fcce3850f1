"""CPU tier: the tensor-core attention kernels' own CUDA source (attention_03_mma,
attention_04_ldmatrix, attention_05_pipelined) run on the CPU by the emulator in tests/emulator/
(simt.h: one fiber per thread, barriers, warp-collective mma.sync / ldmatrix / shuffles computed
from the PTX ISA's definitions, cp.async copies landing only at the wait, shared memory poisoned
with NaN, inputs and outputs followed by inaccessible pages, warps interleaved at random).

Each kernel is checked on awkward shapes against the float64 reference with the error rule (at most
twice the error of the kernels' NumPy model, which has the same rounding points, plus two ulps), and
against the model itself (twice the model's error plus two ulps of the largest |output|),
LSE within 1e-5 relative, rows that see no key exactly 0 and -inf, every output written. Then
deliberately broken copies of the kernels (a barrier removed, the swizzle or .trans dropped, the
mask or the zero fill or the cp.async wait left out, the -inf guard off) must be rejected: that
is what makes the check worth having. The emulator's own fragment maps are compared with
mma_fragments.py's. Needs a C++17 compiler with _Float16 (g++ 12); skipped without one except
under CI=true.
"""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from onlinesoftmax import checks
from onlinesoftmax.kernels import attention_blocked as ab
from onlinesoftmax.kernels import attention_mma as am
from onlinesoftmax.kernels import mma_fragments as mf
from onlinesoftmax.runtime.loader import KERNELS_DIR, REPO_ROOT

EMULATOR = REPO_ROOT / "tests" / "emulator"
STEMS = [v.name for v in am.VARIANTS]
TAGS = {"bfloat16": "bf16", "float16": "f16"}
POISON_BITS = 0x7B7B           # run_attention.cpp fills the output with these bits first


def compiler() -> str:
    found = shutil.which(os.environ.get("CXX", "g++"))
    if found is None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail("no C++ compiler, and CI=true: the emulated kernels must run in CI")
        pytest.skip("no C++ compiler (g++) for the CPU emulator")
    return found


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emulator")


def build(build_dir: Path, stem: str, source: str | None = None, flags=(), optimize="-O2") -> Path:
    """The emulator binary of kernel `stem` (its file, or `source` in its place), cached by content."""
    text = source if source is not None else (KERNELS_DIR / "attention" / f"{stem}.cu").read_text()
    headers = "".join(p.read_text() for p in sorted((KERNELS_DIR / "common").glob("*.cuh")))
    emulator = "".join(p.read_text() for p in sorted(EMULATOR.glob("*")) if p.is_file())
    key = hashlib.sha256((text + headers + emulator + " ".join(flags) + optimize).encode()).hexdigest()[:16]
    binary = build_dir / f"{stem}-{key}"
    if binary.exists():
        return binary
    tree = build_dir / f"src-{key}"
    (tree / "attention").mkdir(parents=True, exist_ok=True)
    (tree / "attention" / f"{stem}.cu").write_text(text)
    command = [compiler(), "-std=c++17", optimize, f"-I{KERNELS_DIR / 'common'}", f"-I{tree}", f"-I{EMULATOR}",
               f'-DKERNEL_SOURCE="attention/{stem}.cu"', f"-DKERNEL_STEM={stem}", *flags,
               str(EMULATOR / "run_attention.cpp"), "-o", str(binary)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"emulator build failed:\n{' '.join(command)}\n{done.stderr[-4000:]}"
    return binary


def run(binary: Path, workdir: Path, stem: str, q, k, v, causal: bool, seed: int = 1):
    """(returncode, stderr, out, lse) of one launch on the emulator, with the launcher's arguments."""
    batch, heads, n_q, d = q.shape
    kv_heads, n_k = k.shape[1], k.shape[2]
    for name, a in (("q", q), ("k", k), ("v", v)):
        np.ascontiguousarray(a).view(np.uint16).tofile(workdir / f"{name}.bin")
    scale_log2 = np.float32(1 / np.sqrt(d) * am.LOG2E)
    args = [str(binary), str(workdir), f"{TAGS[q.dtype.name]}_d{d}", batch, heads, kv_heads, n_q, n_k, d,
            repr(float(scale_log2)), int(causal), 1, am.shared_bytes(stem, d), seed]
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return done.returncode, done.stderr, None, None
    out = np.fromfile(workdir / "out.bin", np.uint16).reshape(q.shape)
    lse = np.fromfile(workdir / "lse.bin", np.float32).reshape(q.shape[:3])
    return 0, done.stderr, out, lse


def make_qkv(batch, heads, kv_heads, n_q, n_k, d, dtype, seed, q_scale=1.0):
    rng = np.random.default_rng(seed)
    draw = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    return (checks.to_dtype(draw(batch, heads, n_q, d) * np.float32(q_scale), dtype),
            checks.to_dtype(draw(batch, kv_heads, n_k, d), dtype), checks.to_dtype(draw(batch, kv_heads, n_k, d), dtype))


def judge(out_bits, lse, q, k, v, causal) -> str | None:
    """None when the emulated kernel's answer passes the rule, else what is wrong."""
    if (out_bits == POISON_BITS).any():
        return f"{int((out_bits == POISON_BITS).sum())} outputs left unwritten"
    out = checks.as_float64(out_bits.view(q.dtype))
    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
    model, _ = am.simulate(q, k, v, causal=causal)
    if np.isnan(out).any() or np.isnan(lse).any():
        return "NaN in the output"
    blind = ~np.isfinite(lse_ref)
    if not ((out[blind] == 0).all() and np.isneginf(lse[blind]).all() and np.isfinite(lse[~blind]).all()):
        return "rows that see no key must give 0 and LSE -inf, the others a finite LSE"
    err = float(np.abs(out - ref).max())
    model_err = float(np.abs(checks.as_float64(model) - ref).max())
    tol = checks.tolerance(model_err, ref, q.dtype.name)
    if err > tol:
        return f"error {err:.3e} > tolerance {tol:.3e}"
    gap = float(np.abs(out - checks.as_float64(model)).max())   # same rounding points: no floor at 1
    gap_tol = 2 * model_err + 2 * checks.EPS[q.dtype.name] * float(np.abs(ref).max())
    if gap > gap_tol:
        return f"kernel vs its model {gap:.3e} > {gap_tol:.3e}"
    lse_err = float(np.abs(lse[~blind] - lse_ref[~blind]).max(initial=0))
    if lse_err > 1e-5 * max(1.0, float(np.abs(lse_ref[~blind]).max(initial=1))):
        return f"LSE error {lse_err:.3e}"
    return None


SHAPES = [   # (batch, heads, kv_heads, n_q, n_k, d, causal, dtype, q_scale)
    (1, 2, 1, 1, 1, 64, False, "bfloat16", 1.0),
    (1, 2, 2, 33, 100, 64, True, "float16", 1.0),
    (1, 4, 2, 200, 65, 128, True, "bfloat16", 1.0),       # n_q > n_k: 135 rows see no key
    (2, 2, 1, 130, 257, 128, False, "float16", 1.0),      # two query tiles, a short last key tile
    (1, 8, 1, 70, 300, 64, True, "bfloat16", 1.0),        # 8 query heads on one kv head
    (1, 2, 2, 129, 192, 64, False, "bfloat16", 30.0),     # scores in the hundreds
]


@pytest.mark.parametrize("stem", STEMS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_h{}-{}_q{}_k{}_d{}_{}_{}".format(
    *s[:6], "causal" if s[6] else "full", s[7]))
def test_the_kernel_source_on_the_emulator(build_dir, tmp_path, stem, shape):
    *dims, causal, dtype, q_scale = shape
    q, k, v = make_qkv(*dims, dtype, seed=sum(dims), q_scale=q_scale)
    code, stderr, out, lse = run(build(build_dir, stem), tmp_path, stem, q, k, v, causal, seed=sum(dims))
    assert code == 0, f"emulator exit {code}: {stderr}"
    problem = judge(out, lse, q, k, v, causal)
    assert problem is None, f"{stem} {shape}: {problem}"


def test_the_emulator_reads_fragments_as_mma_fragments_says(build_dir):
    done = subprocess.run([str(build(build_dir, STEMS[0])), "layouts"], capture_output=True, text=True, check=True)
    maps = {"A": mf.A_MAP, "B": mf.B_MAP}
    for line in done.stdout.split("\n"):
        if not line:
            continue
        kind, lane, reg, half, row, col = line.split()
        lane, reg, half, row, col = map(int, (lane, reg, half, row, col))
        expected = mf.C_MAP[lane, reg] if kind == "C" else maps[kind][lane, reg, half]
        assert expected.tolist() == [row, col], line


MUTANTS = [   # (kernel, text to change, replacement, what it breaks)
    ("attention_03_mma", "__syncthreads();   // every warp is done with the previous tile's Ks and Vs", "",
     "the barrier before a tile is overwritten"),
    ("attention_04_ldmatrix", "ldmatrix_x4(b, Ks + swizzled<D>(8 * j + k_row, 16 * kk + k_col))",
     "ldmatrix_x4(b, Ks + (8 * j + k_row) * D + 16 * kk + k_col)", "K read without the swizzle it was stored with"),
    ("attention_04_ldmatrix", "ldmatrix_x4_trans(b, Vs", "ldmatrix_x4(b, Vs", "V read without .trans"),
    ("attention_05_pipelined", "cp_async_wait_all_groups();", "", "the wait for the copies"),
    ("attention_05_pipelined", "__syncthreads();              // everyone's have; and every warp is done with the other stage", "", "the barrier after the wait"),
    ("attention_05_pipelined", "k0 + MMA_BLOCK_K > keys.unmasked_end", "false", "the mask of partial tiles"),
    ("attention_05_pipelined", "const bool inside = k0 + row < n_k;", "const bool inside = true;",
     "the zero fill of keys past n_k"),
]


@pytest.mark.parametrize("stem, old, new, why", MUTANTS, ids=[m[3].replace(" ", "_") for m in MUTANTS])
def test_a_broken_kernel_is_rejected(build_dir, tmp_path, stem, old, new, why):
    source = (KERNELS_DIR / "attention" / f"{stem}.cu").read_text()
    assert old in source, f"the mutant's text is gone from {stem}.cu: update MUTANTS"
    binary = build(build_dir, stem, source.replace(old, new, 1), optimize="-O1")
    q, k, v = make_qkv(1, 2, 1, 150, 200, 64, "bfloat16", seed=3)     # causal, a short last key tile
    code, stderr, out, lse = run(binary, tmp_path, stem, q, k, v, causal=True, seed=5)
    assert code != 0 or judge(out, lse, q, k, v, True) is not None, f"a kernel without {why} passed"


def test_the_unguarded_softmax_is_rejected(build_dir, tmp_path):
    """-DONLINE_SOFTMAX_GUARDS=0 (online_state.cuh): rows that see no key compute 2^(-inf - -inf)."""
    stem = "attention_05_pipelined"
    binary = build(build_dir, stem, flags=("-DONLINE_SOFTMAX_GUARDS=0",), optimize="-O1")
    q, k, v = make_qkv(1, 2, 1, 100, 40, 64, "float16", seed=4)
    code, stderr, out, lse = run(binary, tmp_path, stem, q, k, v, causal=True)
    assert code == 0, stderr
    assert judge(out, lse, q, k, v, True) is not None
