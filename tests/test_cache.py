"""CPU tier: the package's one cache module (onlinesoftmax/runtime/cache.py): every cache bounded, emptied
together by clear() and onlinesoftmax.reload(), listed by report(); least recently used entries leave first
(plans, kernels), or the oldest (the fast paths, whose hit is a plain dictionary lookup)."""
import pytest

import onlinesoftmax as osm
from onlinesoftmax import api, attention_api, topk
from onlinesoftmax.runtime import cache, device, driver, loader, plan


def test_every_cache_of_the_package_is_registered():
    names = {line["name"] for line in cache.report()}
    assert {"plans", "kernels", "compiled modules", "occupancy", "cluster probe", "device properties",
            "softmax fast path", "softmax_topk fast path", "attention fast path"} <= names
    for owned in (plan._runners, loader._kernels, loader._modules, driver._occupancy, driver._cluster_probe,
                  device._properties, api._fast_path, topk._fast_path, attention_api._fast_path):
        assert cache.CACHES[owned.name] is owned


@pytest.fixture
def scratch():
    made = []

    def make(*args, **kwargs):
        one = cache.Cache(f"test cache {len(made)}", *args, **kwargs)
        made.append(one)
        return one
    yield make
    for one in made:
        cache.CACHES.pop(one.name)


def test_lru_keeps_what_was_used_last(scratch):
    lru = scratch(3)
    for key in "abc":
        lru.put(key, key.upper())
    assert lru.get("a") == "A"           # a is now the most recent
    lru.put("d", "D")                     # b, the least recently used, goes
    assert "b" not in lru and [k for k in "acd" if k in lru] == list("acd") and len(lru) == 3


def test_fifo_drops_the_oldest_whatever_was_read(scratch):
    fifo = scratch(2, order="fifo")
    fifo.put("a", 1), fifo.put("b", 2)
    assert fifo.get("a") == 1 and fifo.get("z") is None
    fifo.put("c", 3)
    assert "a" not in fifo and "b" in fifo and "c" in fifo


def test_bytes_bound_and_report(scratch):
    held = scratch(100, max_bytes=1000, nbytes=lambda value: value)
    held.put("x", 600), held.put("y", 300)
    assert held.bytes == 900
    held.put("z", 500)                    # 1400 > 1000: x goes first
    assert "x" not in held and held.bytes == 800
    held.put("y", 100)                    # replacing a value counts its bytes once
    assert held.bytes == 600
    line = next(r for r in cache.report() if r["name"] == held.name)
    assert line["entries"] == 2 and line["bytes"] == 600 and line["max_bytes"] == 1000


def test_clear_and_reload_empty_every_cache(scratch):
    one = scratch(4)
    one.put("k", "v")
    api._fast_path.put(("probe",), None)
    osm.reload()
    assert not one and not api._fast_path and one.bytes == 0
    one.put("k", "v")
    cache.clear()
    assert not one


def test_bad_order_and_a_second_name_are_refused(scratch):
    with pytest.raises(ValueError, match="'lru' or 'fifo'"):
        cache.Cache("odd", 3, order="random")
    scratch(1)
    with pytest.raises(ValueError, match="exists already"):
        cache.Cache("test cache 0", 1)


def test_the_fast_paths_count_the_bytes_their_runners_hold(monkeypatch):
    """A fast path's entry keeps its runner (and the runner's partial-state buffers) alive after the plan
    cache let it go: each fast path is bounded by PLAN_BYTES of runner buffers as well. The wrong answer
    (a fast path bounded by entries only) holds every entry's buffers, here 5 x 400 bytes past a 1000 bound."""
    class Runner:
        def __init__(self, nbytes):
            self.nbytes = nbytes

    for fast in (api._fast_path, topk._fast_path, attention_api._fast_path):
        assert fast.max_bytes == plan.PLAN_BYTES and fast.order == "fifo"
    monkeypatch.setattr(plan, "PLAN_BYTES", 1000)
    bounded = plan.fast_path_cache("test fast path", "bounded by bytes")
    try:
        for i in range(5):
            bounded.put(i, (Runner(400), (1, 2)))
        assert bounded.bytes <= 1000 and len(bounded) == 2 and 4 in bounded
        bounded.put("no runner", None)                  # entries without a runner count nothing
        assert bounded.bytes == 800
        unbounded = cache.Cache("test fast path by entries", plan.FAST_PATH_LIMIT, order="fifo")
        try:
            for i in range(5):
                unbounded.put(i, (Runner(400), (1, 2)))
            assert sum(entry[0].nbytes for entry in unbounded._data.values()) == 2000 > 1000
        finally:
            cache.CACHES.pop(unbounded.name)
    finally:
        cache.CACHES.pop(bounded.name)


def test_the_readme_states_the_bounds_the_code_has():
    """README's paragraph on what the library keeps between calls quotes these constants."""
    from pathlib import Path

    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert plan.PLAN_LIMIT == plan.FAST_PATH_LIMIT == 4096 and plan.PLAN_BYTES == 2**30
    assert "the plans (at most 4,096, least recently used out first)" in readme
    assert "(4,096, oldest out first) each hold at most 1 GiB" in readme
    assert plan._runners.order == "lru" and api._fast_path.order == "fifo"
