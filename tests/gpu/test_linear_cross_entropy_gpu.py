"""GPU tier for linear_cross_entropy: bf16 and fp32 losses and gradients against the float64 ones,
within twice torch's same-dtype error (torch's F.cross_entropy(hidden @ weight.T) and its autograd)
plus a floor, for weight_grad "sum" and "recompute"; the peak memory of a call below torch's path, and
with "recompute" at most 2 % of the logits beyond the gradients the call returns; a few training
steps against torch's."""
import numpy as np
import pytest

import onlinesoftmax as osm

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu


def problem(tokens, hidden, vocab, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    h = torch.randn(tokens, hidden, device="cuda", generator=g).to(dtype)
    w = (torch.randn(vocab, hidden, device="cuda", generator=g) / hidden ** 0.5).to(dtype)
    t = torch.randint(0, vocab, (tokens,), device="cuda", generator=g)
    t[::9] = -100
    return h, w, t


@pytest.mark.parametrize("weight_grad", ("sum", "recompute"))
@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
@pytest.mark.parametrize("shape", [(1000, 256, 32000), (257, 512, 128256), (64, 128, 1000)], ids=str)
def test_against_float64_within_twice_torchs_error(dtype, shape, weight_grad):
    h, w, t = problem(*shape, getattr(torch, dtype))
    results = []
    for fn, precision in ((lambda h, w: osm.linear_cross_entropy(h, w, t, weight_grad=weight_grad), None),   # ours
                          (lambda h, w: torch.nn.functional.cross_entropy(h @ w.T, t), torch.float64),   # exact
                          (lambda h, w: torch.nn.functional.cross_entropy(h @ w.T, t), None)):         # torch's
        hh, ww = (a.detach().to(precision or a.dtype).requires_grad_() for a in (h, w))
        loss = fn(hh, ww)
        results.append((loss.detach().double(), *(g.double() for g in torch.autograd.grad(loss, (hh, ww)))))
    ours, exact, theirs = results
    for a, e, b in zip(ours, exact, theirs):
        floor = 2 * float(torch.finfo(getattr(torch, dtype)).eps) * float(e.abs().max())
        assert float((a - e).abs().max()) <= 2 * float((b - e).abs().max()) + floor


def test_peak_memory_below_torchs_path():
    h, w, t = problem(4096, 1024, 128256, torch.bfloat16)
    peaks = []
    for fn in (lambda h, w: osm.linear_cross_entropy(h, w, t), lambda h, w: torch.nn.functional.cross_entropy(h @ w.T, t)):
        hh, ww = (a.detach().clone().requires_grad_() for a in (h, w))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn(hh, ww).backward()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - base)
    assert peaks[0] < peaks[1], f"ours {peaks[0] / 2**20:.0f} MiB, torch's {peaks[1] / 2**20:.0f} MiB"


def test_recompute_holds_at_most_two_percent_of_the_logits():
    """Beyond the inputs and the gradients it returns (dh and dW, which every path writes), at the
    second step of a loop: the first also makes what torch keeps for every later product (cuBLAS's
    workspace, 32 MiB on an H100)."""
    tokens, hidden, vocab = 8192, 1024, 128256
    h, w, t = problem(tokens, hidden, vocab, torch.bfloat16)
    logits = tokens * vocab * 2
    for step in range(2):
        hh, ww = (a.detach().clone().requires_grad_() for a in (h, w))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        osm.linear_cross_entropy(hh, ww, t, weight_grad="recompute").backward()
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base - hh.grad.nbytes - ww.grad.nbytes
        del hh, ww
    assert extra <= 0.02 * logits, f"{extra / 2**20:.0f} MiB beyond the gradients, logits {logits / 2**20:.0f} MiB"


def test_training_steps_match_torch():
    torch.manual_seed(0)
    x, y = torch.randn(512, 64, device="cuda"), torch.randint(0, 1000, (512,), device="cuda")
    losses = []
    for loss_fn in (lambda h, lin: osm.linear_cross_entropy(h, lin.weight, y, lin.bias),
                    lambda h, lin: torch.nn.functional.cross_entropy(lin(h), y)):
        torch.manual_seed(1)
        body, head = torch.nn.Linear(64, 64).cuda(), torch.nn.Linear(64, 1000).cuda()
        optimizer = torch.optim.SGD([*body.parameters(), *head.parameters()], lr=0.5)
        run = []
        for _ in range(5):
            optimizer.zero_grad()
            loss = loss_fn(torch.tanh(body(x)), head)
            loss.backward()
            optimizer.step()
            run.append(loss.item())
        losses.append(run)
    assert np.allclose(losses[0], losses[1], rtol=1e-4)
