"""GPU tier for attention_backward_02_mma, attention_backward_03_pipelined and attention_backward_04_wgmma
(the backward on tensor cores; the second and third have the first's arithmetic and NumPy model): dq, dk, dv against the float64
gradients (at most twice the kernel's NumPy model's error plus two ulps of the gradient's scale) over N
in {1, 31, 63, 64, 65, 127, 129, 257, 1000, 4097}, both dtypes and head dimensions, causal and not, grouped heads, n_q !=
n_k; against torch's FLASH backend at training shapes (each gradient's error at most twice torch's
plus two ulps, both against float64 on the same bf16 tensors); gradients poisoned first; two threads
on two streams."""
import threading

import cupy as cp
import numpy as np
import pytest

import onlinesoftmax as osm
from onlinesoftmax import checks
from onlinesoftmax.kernels.attention import backward_blocked as bb
from onlinesoftmax.kernels.attention import backward_mma as bm
from test_attention_backward_gpu import make   # q, k, v, dout and the forward's out and LSE

pytestmark = pytest.mark.gpu


def judge(grads, dout, q, k, v, out, lse, causal):
    refs = bb.reference(dout, q, k, v, causal)
    model = bm.simulate(dout, q, k, v, out, lse, causal)
    for name, got, ref, mod in zip(("dq", "dk", "dv"), grads, refs, model):
        y = checks.as_float64(checks.host(got))
        assert not np.isnan(y).any(), f"{name}: NaN"
        model_err = float(np.abs(checks.as_float64(mod) - ref).max())
        err = float(np.abs(y - ref).max())
        assert err <= checks.tolerance(model_err, ref, q.dtype.name), f"{name}: error {err:.3g}, the model's {model_err:.3g}"


def on_gpu(args):
    dtype = args[1].dtype.name
    return [checks.from_float32(cp.asarray(np.asarray(a, np.float32)), dtype) for a in args[:5]] + [cp.asarray(args[5])]


VARIANTS = ("mma", "pipelined", "wgmma")


def run(args, causal, variant):
    return osm.attention_backward(*on_gpu(args), causal=causal, variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("n", (1, 31, 63, 64, 65, 127, 129, 257, 1000, 4097))   # the block edges of both kernels
@pytest.mark.parametrize("causal", (False, True))
def test_lengths_dtypes_and_masks(dtype, n, causal, variant):
    args = make(1, 4, 2, n, n, 64 if n > 1000 else 128, dtype, causal, seed=n)
    judge(run(args, causal, variant), *args, causal)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", [(2, 8, 2, 100, 333), (1, 4, 4, 333, 100), (2, 6, 1, 1, 2000), (1, 32, 8, 700, 700)],
                         ids=str)
@pytest.mark.parametrize("d", (64, 128))
def test_groups_and_unequal_lengths(shape, d, variant):
    args = make(*shape, d, "bfloat16", True, seed=sum(shape))
    judge(run(args, True, variant), *args, True)


@pytest.mark.parametrize("variant", ("auto", "mma", "pipelined"))   # auto: wgmma on an H100 or H200
@pytest.mark.parametrize("causal", (False, True))
def test_against_torchs_flash_backward(causal, variant):
    """bf16, d = 128, N = 2048: each gradient within twice the FLASH backend's error against float64."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(3)
    q, k, v, g = (torch.randn(1, 8, 2048, 128, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        theirs = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=causal),
                                     (qg, kg, vg), g)
    out, lse = osm.attention(q, k, v, causal=causal, return_lse=True)            # torch tensors in and out
    ours = osm.attention_backward(g, q, k, v, out, lse, causal=causal, variant=variant)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    exact = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=causal),
                                (q64, k64, v64), g.double())
    for name, a, b, e in zip(("dq", "dk", "dv"), ours, theirs, exact):
        a = a.double()
        ours_err, torch_err = float((a - e).abs().max()), float((b.double() - e).abs().max())
        assert ours_err <= 2 * torch_err + 2 * checks.EPS["bfloat16"] * float(e.abs().max()), \
            f"{name}: ours {ours_err:.3g}, FLASH {torch_err:.3g}"


@pytest.mark.parametrize("variant", VARIANTS)
def test_two_threads_on_two_streams(variant):
    cases = [make(2, 8, 2, 500, 700, 128, "bfloat16", True, seed=s) for s in (1, 2)]
    inputs = [on_gpu(c) for c in cases]
    alone = [[cp.asnumpy(g) for g in osm.attention_backward(*i, causal=True, variant=variant)] for i in inputs]
    got = [None, None]

    def work(i):
        with cp.cuda.Stream(non_blocking=True) as stream:
            for _ in range(5):
                result = osm.attention_backward(*inputs[i], causal=True, variant=variant)
            stream.synchronize()
            got[i] = [cp.asnumpy(g) for g in result]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(2):   # dq's atomics may order differently: within the rule, dk and dv the same bits
        judge(got[i], *cases[i], True)
        assert all(np.array_equal(a, b) for a, b in zip(got[i][1:], alone[i][1:]))
