"""Where the time of one linear cross-entropy step goes on a GPU, kernel by kernel (torch's profiler).

    python3 scripts/linear_loss_profile.py [--weight-grad sum|recompute] [--tokens 8192] [--hidden 4096]
        [--vocab 128256] [--chunk N] [--vocab-chunk N]

One warm-up step, then one profiled step: the CUDA kernels by total device time, the step's wall
time, and how many host synchronizations torch saw (cudaStreamSynchronize / cudaDeviceSynchronize).
"""
import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

import onlinesoftmax as osm

parser = argparse.ArgumentParser()
parser.add_argument("--weight-grad", default="recompute")
parser.add_argument("--tokens", type=int, default=8192)
parser.add_argument("--hidden", type=int, default=4096)
parser.add_argument("--vocab", type=int, default=128256)
parser.add_argument("--chunk", type=int, default=None)
parser.add_argument("--vocab-chunk", type=int, default=None)
args = parser.parse_args()
g = torch.Generator(device="cuda").manual_seed(0)
h = torch.randn(args.tokens, args.hidden, device="cuda", generator=g).bfloat16() * 0.5
w = torch.randn(args.vocab, args.hidden, device="cuda", generator=g).bfloat16() * 0.02
t = torch.randint(0, args.vocab, (args.tokens,), device="cuda", generator=g)
options = {"weight_grad": args.weight_grad, "chunk": args.chunk}
if args.weight_grad == "recompute":
    options["vocab_chunk"] = args.vocab_chunk


def step():
    hh, ww = h.detach().requires_grad_(), w.detach().requires_grad_()
    osm.linear_cross_entropy(hh, ww, t, **options).backward()


step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
print(f"{args.weight_grad} {args.tokens}x{args.hidden}x{args.vocab}: step {wall * 1e3:.1f} ms wall")
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=18, max_name_column_width=60))
syncs = sum(e.count for e in prof.key_averages() if "Synchronize" in e.key)
print("host synchronizations:", syncs)
