"""Where the time of one cross-entropy forward + backward goes on a GPU, called directly and through
autograd (torch's profiler): the kernels by device time, the step's wall time, and the host
synchronizations torch saw.

    python3 scripts/cross_entropy_profile.py [--tokens 8192] [--vocab 128256] [--dtype bfloat16]

The chapter's measured table shows the autograd call slower than the direct one by more than a
host's fixed cost; the profile says whether that is an extra kernel, an allocation or waiting.
"""
import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

import onlinesoftmax as osm
import onlinesoftmax.torch_ops  # noqa: F401  (registers the operator)

parser = argparse.ArgumentParser()
parser.add_argument("--tokens", type=int, default=8192)
parser.add_argument("--vocab", type=int, default=128256)
parser.add_argument("--dtype", default="bfloat16")
args = parser.parse_args()
g = torch.Generator(device="cuda").manual_seed(0)
x = (torch.randn(args.tokens, args.vocab, device="cuda", generator=g) * 2).to(getattr(torch, args.dtype))
t = torch.randint(0, args.vocab, (args.tokens,), device="cuda", generator=g)
xg = x.clone().requires_grad_()
calls = {"direct": lambda: osm.cross_entropy_with_grad(x, t),
         "autograd": lambda: torch.autograd.grad(osm.cross_entropy(xg, t), xg),
         "torch": lambda: torch.autograd.grad(torch.nn.functional.cross_entropy(xg, t), xg)}
for name, call in calls.items():
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        start = time.perf_counter()
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / 5
    print(f"== {name} {args.tokens}x{args.vocab} {args.dtype}: {wall * 1e3:.3f} ms wall a call (5 calls profiled)")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=50))
    print("host synchronizations:", sum(e.count for e in prof.key_averages() if "Synchronize" in e.key),
          " cudaMalloc:", sum(e.count for e in prof.key_averages() if "cudaMalloc" in e.key))
