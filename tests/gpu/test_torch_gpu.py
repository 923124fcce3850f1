"""GPU tier: the kernels called from PyTorch, as a model's code calls them.

- threads: 8 threads that never touched CUDA before, mixed functions, shapes and dtypes, torch and CuPy
  inputs, every output checked;
- torch's streams: producer and consumer on a non-default torch stream behind a long kernel, 100+
  iterations, every output checked (a launch on another stream would read x before it is written);
- gradients through the operators against torch's for every operator and dtype, with the book's rule;
- torch.compile(fullgraph=True) of a small model using the operators (inductor);
- a decode loop with a growing KV length: the device memory held stays within the caches' byte bounds;
- beside each, the wrong answer it rejects: launches on the legacy stream, arguments traded between
  threads, a fast path that keeps every plan's buffers (bounded by entries only);
- the torch fast path: a repeated plain call is one lookup, and its result stays right.
"""
import threading

import cupy as cp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onlinesoftmax as osm  # noqa: E402
import onlinesoftmax.torch_ops  # noqa: E402,F401
from onlinesoftmax import api, attention_api  # noqa: E402
from onlinesoftmax.runtime import cache, plan  # noqa: E402

pytestmark = pytest.mark.gpu
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def close_to_torch(ours, theirs, x64_result, dtype_eps):
    """|ours - float64| <= 2 |torch - float64| + 2 ulps of the largest |float64| (the book's rule)."""
    ours_err = (ours.double() - x64_result).abs().nan_to_num(posinf=np.inf).max().item()
    torch_err = (theirs.double() - x64_result).abs().max().item()
    scale = x64_result.abs()[x64_result.isfinite()].max().item()
    return ours_err <= 2 * torch_err + 2 * dtype_eps * scale, (ours_err, torch_err, scale)


EPS = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7, torch.float64: 2.0**-52}


def test_threads_that_never_used_cuda_call_every_function():
    errors, done = [], []
    cases = [(osm.softmax, torch.softmax, (64, 1000)), (osm.log_softmax, torch.log_softmax, (7, 70000)),
             (lambda t: osm.logsumexp(t), lambda t, d: torch.logsumexp(t.float(), d), (300, 4096)),
             (osm.softmax, torch.softmax, (2, 262144)), (osm.softmax, torch.softmax, (5000, 128))]

    def work(index):
        try:
            for step in range(30):
                ours, theirs, shape = cases[(index + step) % len(cases)]
                dtype = DTYPES[(index + step) % 3]
                x = torch.randn(shape, device="cuda", dtype=torch.float32).mul_(4).to(dtype)
                use_cupy = step % 2 == 0 and dtype != torch.bfloat16
                got = ours(cp.asarray(x)) if use_cupy else ours(x)
                got = torch.as_tensor(got, device="cuda") if use_cupy else got
                want = theirs(x.double(), -1)
                ok, detail = close_to_torch(got, theirs(x, -1), want, EPS[dtype] * 4)
                if not ok:
                    errors.append((index, step, shape, dtype, detail))
                if step % 5 == 0:
                    probs, cols = osm.softmax_topk(x, 5)
                    if not torch.equal(x.gather(-1, cols), torch.topk(x, 5).values):
                        errors.append((index, step, "topk"))
            done.append(index)
        except Exception as error:  # noqa: BLE001  (reported by the main thread)
            errors.append((index, repr(error)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors[:5]
    assert sorted(done) == list(range(8))


def test_a_thread_whose_first_cuda_call_is_ours():
    """A repeated call from a new thread goes straight to the driver launch: the thread has no current
    context yet, and the launch must make it current, not fail with CUDA_ERROR_INVALID_CONTEXT."""
    x = torch.randn(64, 4096, device="cuda")
    osm.softmax(x)                                    # the plan and the fast path, made here
    for function in (osm.log_softmax, osm.logsumexp):
        function(x)
    torch.cuda.synchronize()
    results, errors = {}, []

    def work(name):
        try:
            results[name] = getattr(osm, name)(x)
        except Exception as error:  # noqa: BLE001
            errors.append(repr(error))

    for name in ("softmax", "log_softmax", "logsumexp"):
        thread = threading.Thread(target=work, args=(name,))
        thread.start()
        thread.join()
    assert not errors, errors
    torch.testing.assert_close(results["softmax"], torch.softmax(x, -1))
    torch.testing.assert_close(results["log_softmax"], torch.log_softmax(x, -1))
    torch.testing.assert_close(results["logsumexp"], torch.logsumexp(x, -1))


def test_two_threads_share_one_plan_without_trading_arguments():
    """The same layout from 8 threads at once: one cached plan, one packed argument buffer each call."""
    xs = [torch.randn(256, 4096, device="cuda") * (i + 1) for i in range(8)]
    wants = [torch.softmax(x, -1) for x in xs]
    errors = []

    def work(i):
        for _ in range(200):
            y = osm.softmax(xs[i])
            if not torch.allclose(y, wants[i], rtol=1e-5, atol=1e-7):
                errors.append(i)
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    # the wrong answer: arguments traded between callers (one thread's x under another's launch) fail the check
    assert not any(torch.allclose(osm.softmax(xs[(i + 1) % 8]), wants[i], rtol=1e-5, atol=1e-7) for i in range(8))


def side_stream_failures(dtype, sleep_cycles: int = 20000) -> list[int]:
    """120 iterations of a producer and our consumer on one non-default torch stream, behind a long
    kernel each time: the iterations whose output is wrong (a launch on another stream reads x before
    the producer has written it)."""
    stream = torch.cuda.Stream()
    source = torch.randn(512, 8192, device="cuda").to(dtype)
    results = []
    with torch.cuda.stream(stream):
        for i in range(120):
            x = torch.empty_like(source)
            torch.cuda._sleep(sleep_cycles)               # a long kernel ahead of the producer on this stream
            x.copy_(source * (1 + i % 7))                 # produced on the side stream
            y = osm.softmax(x) if i % 3 else osm.log_softmax(x) if i % 2 else osm.logsumexp(x)
            results.append((i, x, y))
    stream.synchronize()
    failures = []
    for i, x, y in results:
        want = (torch.softmax if i % 3 else torch.log_softmax if i % 2 else torch.logsumexp)(x.double(), -1)
        if not torch.allclose(y.double(), want, rtol=2e-2, atol=1e-2 if dtype != torch.float32 else 1e-5):
            failures.append(i)
    return failures


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_side_stream_producer_and_consumer(dtype):
    assert side_stream_failures(dtype) == []


def test_launching_on_the_legacy_stream_instead_of_torchs_is_caught(monkeypatch):
    """The wrong answer the stream test exists for: the kernels on the legacy default stream (CuPy's
    own, what a plain cupy.asarray call would use), not torch's current one, race the producer."""
    from onlinesoftmax.runtime import torch_bridge

    monkeypatch.setattr(torch_bridge, "stream_address_function", lambda: (lambda index: 0))
    monkeypatch.setattr(api, "_tensor_stream", None)    # restored afterwards, with the type below
    monkeypatch.setattr(api, "_tensor_type", None)      # the fast path re-reads the (patched) stream call
    assert len(side_stream_failures(torch.float32, sleep_cycles=2_000_000)) > 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ("softmax", "log_softmax", "logsumexp"))
def test_gradients_through_the_operators_match_torch(dtype, name):
    torch.manual_seed(3)
    x = (torch.randn(64, 5000, device="cuda") * 3).to(dtype).requires_grad_()
    weight = torch.randn(64, 5000 if name != "logsumexp" else 1, device="cuda").to(dtype)
    ours = {"softmax": lambda t: osm.softmax(t), "log_softmax": lambda t: osm.log_softmax(t),
            "logsumexp": lambda t: osm.logsumexp(t, keepdims=True)}[name]
    theirs = {"softmax": lambda t: torch.softmax(t, -1), "log_softmax": lambda t: torch.log_softmax(t, -1),
              "logsumexp": lambda t: torch.logsumexp(t, -1, keepdim=True)}[name]
    (g_ours,) = torch.autograd.grad((ours(x).float() * weight.float()).sum(), x)
    (g_torch,) = torch.autograd.grad((theirs(x).float() * weight.float()).sum(), x)
    x64 = x.detach().double().requires_grad_()
    (g64,) = torch.autograd.grad((theirs(x64) * weight.double()).sum(), x64)
    assert g_ours.dtype == dtype
    ok, detail = close_to_torch(g_ours, g_torch, g64, EPS[dtype])
    assert ok, detail


def test_torch_compile_fullgraph_of_a_model_using_the_operators():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 1000)

        def forward(self, h):
            logits = self.proj(h)
            return -osm.log_softmax(logits)[:, 0].mean() + osm.logsumexp(logits).pow(2).mean() * 1e-3

    torch.manual_seed(0)
    model = Model().cuda()
    h = torch.randn(32, 64, device="cuda")
    compiled = torch.compile(model, fullgraph=True)
    loss = compiled(h)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    eager = model(h)
    eager.backward()
    torch.testing.assert_close(loss, eager, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_torch_compile_fullgraph_under_no_grad():
    def f(t):
        return osm.logsumexp(t).mean() + osm.softmax(t).amax() + osm.log_softmax(t).sum()

    x = torch.randn(64, 3000, device="cuda")
    with torch.no_grad():
        got = torch.compile(f, fullgraph=True)(x)
        torch.testing.assert_close(got, f(x), rtol=1e-4, atol=1e-3)


def decode_loop_held_bytes() -> int:
    """A decode loop whose KV length grows by 7 each step (a plan per length, the split kernel's partial
    states in each): the most device memory the library held between steps (CuPy's pool; the tensors
    are torch's), each few steps' output checked against torch's SDPA in float64."""
    q = torch.randn(1, 32, 1, 128, device="cuda")       # float32: the split decode kernel, partials per plan
    cache_k = torch.randn(1, 8, 4096, 128, device="cuda")
    cache_v = torch.randn_like(cache_k)
    pool = cp.get_default_memory_pool()
    base, held = pool.used_bytes(), 0
    for length in range(1024, 4096, 7):
        k, v = cache_k[:, :, :length].contiguous(), cache_v[:, :, :length].contiguous()
        out = osm.attention(q, k, v)
        if length % 301 == 0:
            want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
            torch.testing.assert_close(out.double(), want, rtol=1e-4, atol=1e-5)
        held = max(held, pool.used_bytes() - base)
    return held


BOUND = 8 * 2**20


def test_a_decode_loop_with_a_growing_cache_keeps_the_memory_held_bounded(monkeypatch):
    """The plan cache and the attention fast path each keep at most BOUND bytes of runner buffers."""
    cache.clear()                                       # every cache, so that every length builds its plan
    monkeypatch.setattr(plan._runners, "max_bytes", BOUND)
    monkeypatch.setattr(attention_api._fast_path, "max_bytes", BOUND)
    held = decode_loop_held_bytes()
    assert 0 < plan._runners.bytes <= BOUND and attention_api._fast_path.bytes <= BOUND
    assert held <= 2 * BOUND + 2**20, held


def test_a_fast_path_bounded_by_entries_only_holds_every_lengths_partials(monkeypatch):
    """The wrong answer: the plan cache bounded, the fast path not (each entry keeps its runner alive)."""
    cache.clear()
    monkeypatch.setattr(plan._runners, "max_bytes", BOUND)
    monkeypatch.setattr(attention_api._fast_path, "max_bytes", None)
    try:
        assert decode_loop_held_bytes() > 2 * BOUND + 2**20
    finally:
        cache.clear()


def test_a_repeated_plain_call_on_a_tensor_is_one_lookup_and_stays_right():
    x = torch.randn(300, 2048, device="cuda")
    first = osm.softmax(x)
    key = ("torch", "softmax", x.shape, x.stride(), x.dtype, x.data_ptr() & 15, 0, -1,
           torch.cuda.current_stream().cuda_stream)
    assert api._fast_path.get(key) is not None
    x2 = torch.randn(300, 2048, device="cuda")
    second = osm.softmax(x2)
    torch.testing.assert_close(first, torch.softmax(x, -1))
    torch.testing.assert_close(second, torch.softmax(x2, -1))
    assert second.data_ptr() != first.data_ptr()
