"""Where the memory of one linear cross-entropy step goes, op by op (a GPU and torch needed).

    python3 scripts/linear_loss_memory.py [--weight-grad recompute|sum] [--tokens 8192] [--vocab 128256]

Every torch op whose output's storage exceeds 8 MiB is printed with torch's allocated and peak
memory at that moment (above what the inputs hold) and the package lines that made it; then the
peak of the forward and of the backward, and whether .grad is the very tensor the forward made.
Memory CuPy allocates (the loss kernel's per-row outputs) is not torch's and is not counted.
"""
import argparse
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import onlinesoftmax as osm

MiB = 2**20


class LargeOutputs(TorchDispatchMode):
    def __init__(self, base):
        super().__init__()
        self.base = base

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in tree_leaves(out):
            if isinstance(o, torch.Tensor) and o.is_cuda and o.untyped_storage().nbytes() > 8 * MiB:
                where = [f"{f.filename.split('/')[-1]}:{f.lineno}" for f in traceback.extract_stack()
                         if "onlinesoftmax" in f.filename][-2:]
                print(f"{str(func):34s} {str(tuple(o.shape)):18s} {str(o.dtype):15s} "
                      f"{o.untyped_storage().nbytes() / MiB:6.0f} MiB  allocated {self.now():6.0f}  "
                      f"peak {self.peak():6.0f}  {' < '.join(where)}")
        return out

    def now(self):
        return (torch.cuda.memory_allocated() - self.base) / MiB

    def peak(self):
        return (torch.cuda.max_memory_allocated() - self.base) / MiB


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weight-grad", default="recompute", choices=("recompute", "sum"))
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=128256)
    a = parser.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(a.tokens, a.hidden, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(a.vocab, a.hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02).requires_grad_()
    t = torch.randint(0, a.vocab, (a.tokens,), device="cuda", generator=g)
    print(f"logits would take {a.tokens * a.vocab * 2 / MiB:.0f} MiB; 2 % of them {0.02 * a.tokens * a.vocab * 2 / MiB:.0f} MiB")
    for step in range(2):   # the second step runs with torch's and cuBLAS's first-call allocations made
        h.grad = w.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        mode = LargeOutputs(torch.cuda.memory_allocated())
        with mode:
            loss = osm.linear_cross_entropy(h, w, t, weight_grad=a.weight_grad)
            torch.cuda.synchronize()
            print(f"step {step}, after the forward: allocated {mode.now():.0f} MiB, peak {mode.peak():.0f} MiB")
            loss.backward()
            torch.cuda.synchronize()
        grads = (h.grad.nbytes + w.grad.nbytes) / MiB
        print(f"step {step}, after the backward: allocated {mode.now():.0f} MiB, peak {mode.peak():.0f} MiB, "
              f"of which the gradients {grads:.0f} MiB: {mode.peak() - grads:.0f} MiB beyond them")


if __name__ == "__main__":
    main()
