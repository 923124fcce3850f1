"""CPU tier: a repeated attention call of the same layouts takes the fast path (one lookup, two
allocations, the launches), as softmax and softmax_topk do; a call whose inputs were copied is never
cached. The cupy path runs on numpy arrays dressed as cupy ones (tests/test_api.py's FakeDeviceArray)."""

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import attention_api
from onlinesoftmax.runtime import device
from test_api import FakeDeviceArray, fake_gpu, hot_path_forbids_io  # noqa: F401  (the fixture)
from test_topk_fast_path import Allocated


@pytest.fixture
def attention_gpu(fake_gpu, monkeypatch):  # noqa: F811
    """fake_gpu, plus attention's runners recorded and its plans counted."""
    launches, built = [], []
    monkeypatch.setattr(attention_api.api, "new_cupy_array", lambda shape, dtype=None: Allocated(np.empty(shape, dtype)))
    monkeypatch.setattr(device, "compute_capability", lambda: 90)

    def fake_get_runner(variant, q, out, options):
        built.append((variant.name, q.shape, options["lse"] is not None))

        def runner(q, out, k=None, v=None, lse=None, **_):
            launches.append((variant.name, q.data.ptr, k.data.ptr, v.data.ptr, out.shape,
                             None if lse is None else lse.shape))
        return runner
    monkeypatch.setattr(attention_api, "get_runner", fake_get_runner)
    attention_api._fast_path.clear()
    yield launches, built
    attention_api._fast_path.clear()


def qkv(n_q, n_k=300, heads=8, kv_heads=2, d=128, dtype=np.float16):
    rng = np.random.default_rng(0)
    return tuple(FakeDeviceArray(rng.standard_normal(shape).astype(dtype))
                 for shape in ((2, heads, n_q, d), (2, kv_heads, n_k, d), (2, kv_heads, n_k, d)))


@pytest.mark.parametrize("n_q, return_lse", [(1, False), (1, True), (70, True)])
def test_a_repeated_call_takes_the_fast_path(attention_gpu, n_q, return_lse):
    launches, built = attention_gpu
    q, k, v = qkv(n_q)
    for _ in range(3):
        result = osm.attention(q, k, v, causal=True, return_lse=return_lse)
        out, lse = result if return_lse else (result, None)
        assert out.shape == q.shape and out.dtype == q.dtype
        assert (lse.shape == (2, 8, n_q) and lse.dtype == np.float32) if return_lse else lse is None
    assert len(built) == 1, "only the first call may build (check, choose, plan)"
    assert len(launches) == 3 and len({name for name, *_ in launches}) == 1
    assert {tuple(ptrs) for _, *ptrs, _, _ in launches} == {(q.data.ptr, k.data.ptr, v.data.ptr)}


def test_the_repeated_call_touches_no_file_device_query_or_import(attention_gpu):
    launches, built = attention_gpu
    q, k, v = qkv(1)
    osm.attention(q, k, v)
    with hot_path_forbids_io():
        osm.attention(q, k, v)
    assert len(built) == 1 and len(launches) == 2


def test_other_options_other_keys_copies_never_cached_and_bad_input_still_raises(attention_gpu, monkeypatch):
    launches, built = attention_gpu
    q, k, v = qkv(1)
    osm.attention(q, k, v)
    osm.attention(q, k, v, causal=True)
    osm.attention(q, k, v, scale=0.5)
    osm.attention(q, k, v, return_lse=True)
    assert len(built) == 4, "every other option is another plan"
    osm.attention(q, k, v, scale=np.float32(0.5))
    osm.attention(q, k, v, scale=np.float32(0.5))
    assert len(built) == 6, "an option the key does not take as written is checked every time"
    copies = []
    monkeypatch.setattr(attention_api, "_contiguous_copy",
                        lambda a: copies.append(a) or FakeDeviceArray(np.ascontiguousarray(a.array)))
    strided = FakeDeviceArray(np.zeros((2, 2, 600, 128), np.float16)[:, :, ::2])
    osm.attention(q, strided, strided)
    osm.attention(q, strided, strided)
    assert len(copies) == 4 and len(built) == 8, "a call on copies must not be cached under the views' layout"
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        osm.attention(q, *qkv(1, kv_heads=3)[1:])
    osm.reload()
    assert not attention_api._fast_path, "reload() forgets the fast path"
