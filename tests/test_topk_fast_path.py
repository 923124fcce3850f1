"""CPU tier: a repeated softmax_topk call of the same layout takes the fast path (one lookup, two
allocations, or three with return_lse, the launch), as the api's functions do; what it returns keeps the first call's shapes.
The cupy path runs on numpy arrays dressed as cupy ones (tests/test_api.py's FakeDeviceArray)."""

import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import api, topk
from test_api import FakeDeviceArray, fake_gpu, hot_path_forbids_io  # noqa: F401  (the fixture)


class Allocated(FakeDeviceArray):
    """An output as the fast path allocates it, its address read without ctypes (whose lazy import
    the hot-path test forbids)."""

    def __init__(self, array):
        self.array = array
        self.data = type("Pointer", (), {"ptr": array.__array_interface__["data"][0], "device_id": 0})()
        self.device = type("Device", (), {"id": 0})()

    def reshape(self, *shape):
        return Allocated(self.array.reshape(*shape))


@pytest.fixture
def topk_gpu(fake_gpu, monkeypatch):  # noqa: F811
    """fake_gpu, plus topk's runners recorded, its slow path counted and its allocations listed."""
    launches, built, allocated = [], [], []

    def allocate(shape, dtype=None):
        allocated.append(shape)
        return Allocated(np.empty(shape, dtype))
    monkeypatch.setattr(api, "new_cupy_array", allocate)

    def fake_run(chosen, rows, k, renormalize, probs, indices, lse=None):
        built.append((chosen.name, rows.shape))
        def runner(x, probs, columns=None, lse=None, **_):
            launches.append((chosen.name, x.data.ptr, probs.shape, columns.shape, None if lse is None else lse.shape))
        runner(rows, probs, columns=indices, lse=lse)
        return runner
    monkeypatch.setattr(topk, "run", fake_run)
    topk._fast_path.clear()
    yield launches, built, allocated
    topk._fast_path.clear()


CALLS = {
    "2-D, auto": (lambda x: osm.softmax_topk(x, 5), (40, 300), (40, 5)),
    "2-D, named, return_lse": (lambda x: osm.softmax_topk(x, 5, return_lse=True, variant="online_fused"),
                               (40, 300), (40, 5)),
    "3-D, renormalize": (lambda x: osm.softmax_topk(x, 2, renormalize=True), (4, 10, 64), (4, 10, 2)),
    "1-D": (lambda x: osm.softmax_topk(x, 3), (700,), (3,)),
}


@pytest.mark.parametrize("call", CALLS)
def test_a_repeated_call_takes_the_fast_path(topk_gpu, call):
    launches, built, _ = topk_gpu
    fn, shape, out_shape = CALLS[call]
    x = FakeDeviceArray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    for _ in range(3):
        result = fn(x)
        assert result[0].shape == out_shape and result[1].shape == out_shape
        if "return_lse" in call:
            assert result[2].shape == out_shape[:-1]
    assert len(built) == 1, "only the first call may build (check, choose, plan)"
    assert len(launches) == 3 and len({name for name, *_ in launches}) == 1
    assert {ptr for _, ptr, *_ in launches} == {x.data.ptr}, "every launch reads x itself"


def test_the_lse_is_allocated_and_written_only_when_asked_for(topk_gpu):
    """Without return_lse the kernels get a null LSE (each skips it) and no third array is allocated."""
    launches, built, allocated = topk_gpu
    x = FakeDeviceArray(np.zeros((8, 256), np.float32))
    for return_lse in (False, False, True, True):
        del allocated[:]
        result = osm.softmax_topk(x, 4, return_lse=return_lse)
        assert allocated == [(8, 4), (8, 4)] + ([(8,)] if return_lse else [])
        assert launches[-1][-1] == ((8,) if return_lse else None)
        assert len(result) == (3 if return_lse else 2)
    assert len(built) == 2, "one plan each for a null and a given LSE; the repeats take the fast path"


def test_the_repeated_call_touches_no_file_device_query_or_import(topk_gpu):
    launches, built, _ = topk_gpu
    x = FakeDeviceArray(np.zeros((8, 256), np.float32))
    osm.softmax_topk(x, 4)
    with hot_path_forbids_io():
        osm.softmax_topk(x, 4)
    assert len(built) == 1 and len(launches) == 2


def test_other_arguments_other_keys_and_a_copy_never_cached(topk_gpu):
    """Another k, renormalize or dtype is another plan; an axis other than the last runs on a copy
    (its address is not x's), so it always takes the checked path; bad k still raises."""
    launches, built, _ = topk_gpu
    x = FakeDeviceArray(np.zeros((6, 128), np.float32))
    osm.softmax_topk(x, 4)
    osm.softmax_topk(x, 5)
    osm.softmax_topk(x, 4, renormalize=True)
    assert len(built) == 3
    api._cupy.moveaxis = staticmethod(lambda a, source, destination: FakeDeviceArray(
        np.moveaxis(a.array, source, destination)))
    api._cupy.ascontiguousarray = staticmethod(lambda a: FakeDeviceArray(np.ascontiguousarray(a.array)))
    y = FakeDeviceArray(np.zeros((128, 6), np.float32))
    osm.softmax_topk(y, 4, axis=0)
    osm.softmax_topk(y, 4, axis=0)
    assert len(built) == 5, "a call on a copy of x must not be cached under x's layout"
    with pytest.raises(ValueError, match="k must lie"):
        osm.softmax_topk(x, 500)
    osm.reload()
    assert not topk._fast_path, "reload() forgets the fast path"
