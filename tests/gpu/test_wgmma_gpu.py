"""GPU tier: the wgmma probe (tests/probes/wgmma_probe.cu) on an sm_90a GPU, built by the loader's
NVRTC sm_90a path. Small integers give the exact product, which the CPU emulator also gives
(tests/test_wgmma_layout.py): the emulator reads descriptors and fragments as the hardware does.
Random normal inputs are checked against float64 within 16-bit inputs' rounding."""
import cupy as cp
import numpy as np
import pytest

from onlinesoftmax.runtime import loader

pytestmark = pytest.mark.gpu

PROBE = "tests/probes/wgmma_probe.cu"
ENTRIES = ("wgmma_probe_bf16_ss_k", "wgmma_probe_bf16_ss_mn", "wgmma_probe_bf16_rs_k", "wgmma_probe_bf16_rs_mn",
           "wgmma_probe_f16_ss_k", "wgmma_probe_f16_rs_mn")
SHARED_BYTES = (64 + 128) * 128 * 2 + 1024


def on_hopper() -> bool:
    """A GPU of compute capability 9.0 (False where there is no usable GPU: the module is collected
    on the CPU tier too)."""
    try:
        return cp.cuda.Device().compute_capability == "90"
    except Exception:   # no GPU, or a driver too old for this cupy
        return False


hopper = pytest.mark.skipif(not on_hopper(), reason="wgmma needs sm_90a (H100, H200)")


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return x.astype(np.float16).view(np.uint16)
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)   # round to nearest even


def from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def run_probe(entry: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    dtype, layout = entry.split("_")[2], entry.split("_")[4]
    kernel = loader.get_kernel(PROBE, entry)
    kernel.max_dynamic_shared_size_bytes = SHARED_BYTES
    stored = np.ascontiguousarray(b.T if layout == "k" else b)
    d = cp.full((64, 128), np.nan, cp.float32)
    kernel((1,), (128,), (cp.asarray(to_bits(a, dtype)), cp.asarray(to_bits(stored, dtype)), d),
           shared_mem=SHARED_BYTES)
    cp.cuda.Device().synchronize()
    return d.get()


@hopper
@pytest.mark.parametrize("entry", ENTRIES)
def test_the_probe_is_the_exact_product_of_small_integers(entry):
    rng = np.random.default_rng(11)
    a = rng.integers(-8, 9, size=(64, 128)).astype(np.float64)
    b = rng.integers(-8, 9, size=(128, 128)).astype(np.float64)
    np.testing.assert_array_equal(run_probe(entry, a, b), a @ b)


@hopper
@pytest.mark.parametrize("entry", ENTRIES)
def test_the_probe_on_random_values_is_within_rounding_of_float64(entry):
    rng = np.random.default_rng(5)
    dtype = entry.split("_")[2]
    a = from_bits(to_bits(rng.standard_normal((64, 128)), dtype), dtype)     # the values the GPU sees
    b = from_bits(to_bits(rng.standard_normal((128, 128)), dtype), dtype)
    want = a @ b
    got = run_probe(entry, a, b)
    scale = np.abs(a) @ np.abs(b)
    assert np.isfinite(got).all()
    assert (np.abs(got - want) <= 1e-4 * scale + 1e-6).all(), float(np.max(np.abs(got - want) / scale))


def test_off_hopper_the_loader_says_why():
    if on_hopper():
        pytest.skip("this GPU runs sm_90a builds")
    with pytest.raises(loader.KernelCompileError, match="compute capability 9.0"):
        loader.get_kernel(PROBE, ENTRIES[0])


@hopper
def test_the_driver_encodes_a_tensor_map_for_a_device_tensor():
    from onlinesoftmax.runtime import tensor_maps

    x = cp.zeros((4, 300, 128), cp.float16)
    raw = tensor_maps.encode(x.data.ptr, "float16", 4, 300, 128, 128)
    assert len(raw) == 128 and any(raw)
    with pytest.raises(ValueError, match="16-byte aligned"):
        tensor_maps.encode(x.data.ptr + 8, "float16", 4, 300, 128, 128)
