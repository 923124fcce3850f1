"""Suite `serving`: sampling one token per row of logits, against the paths a server would take instead.

At batch x vocabulary in SHAPES (bf16 logits) and each filter in FILTERS, on the same logits:
  sampling_01_rows    onlinesoftmax.sample(x, ...): one kernel, no sort, no probabilities written
  torch               what vLLM's sampler does in torch: softmax -> sort -> cumsum -> mask -> multinomial
                      (top-p), softmax -> mask below min_p x max -> multinomial (min-p), softmax ->
                      multinomial (plain)
  flashinfer          FlashInfer's sort-free samplers (flashinfer.sampling), from logits where it has a
                      function for it, else from torch.softmax's probabilities; where it imports
`method` "device" (timer.time_gpu: the median over calls, L2 flushed before each). `read_fraction`
is the time of one read of the logits at the read bandwidth measured in the same run, divided by the
call's time (1.0: the call costs one read of the logits). Ours is checked against its NumPy model
(sampling_checks.compare_with_model: the same noise and thresholds) on 4 rows before it is timed.
Targets: >= 5x torch's path, and within 1.3x of one read where the logits are >= 64 MB.

    python -m onlinesoftmax.bench serving [--quick]   (GPU and torch with CUDA; --quick: printed only)
"""
from __future__ import annotations

import sys

import numpy as np

import onlinesoftmax as osm
from onlinesoftmax.measure import bench, results, timer
from onlinesoftmax.sampling_checks import compare_with_model

SUITE = "serving"
SHAPES = tuple((batch, vocab) for vocab in (32000, 128256, 262144) for batch in (1, 32, 256))
QUICK = ((32, 128256),)
FILTERS = {"plain": {}, "top_p=0.9": {"top_p": 0.9}, "min_p=0.05": {"min_p": 0.05},
           "top_k=50,top_p=0.9": {"top_k": 50, "top_p": 0.9}}


def torch_sampler(params: dict):
    """vLLM's torch path for these parameters (temperature 1), as a function of the logits tensor."""
    import torch

    def sample(x):
        probs = torch.softmax(x.float(), dim=-1)
        if "top_p" in params or "top_k" in params:
            ordered, index = probs.sort(dim=-1, descending=True)
            if "top_k" in params:
                ordered[:, params["top_k"]:] = 0
                ordered = ordered / ordered.sum(dim=-1, keepdim=True)
            if "top_p" in params:
                ordered = ordered.masked_fill(ordered.cumsum(dim=-1) - ordered > params["top_p"], 0)
            return index.gather(-1, torch.multinomial(ordered, 1))
        if "min_p" in params:
            probs = probs.masked_fill(probs < params["min_p"] * probs.amax(dim=-1, keepdim=True), 0)
        return torch.multinomial(probs, 1)
    return sample


def flashinfer_sampler(params: dict):
    """FlashInfer's sampler for these parameters as a function of the logits, or (None, why not)."""
    try:
        import torch
        from flashinfer import sampling
    except Exception as error:   # not installed, or its kernels do not load here
        return None, f"{type(error).__name__}: {error}"
    if "top_k" in params and "top_p" in params and hasattr(sampling, "top_k_top_p_sampling_from_logits"):
        return lambda x: sampling.top_k_top_p_sampling_from_logits(x, params["top_k"], params["top_p"]), None
    if "top_p" in params:
        return lambda x: sampling.top_p_sampling_from_probs(torch.softmax(x.float(), -1), params["top_p"]), None
    if "min_p" in params:
        return lambda x: sampling.min_p_sampling_from_probs(torch.softmax(x.float(), -1), params["min_p"]), None
    if hasattr(sampling, "sampling_from_logits"):
        return lambda x: sampling.sampling_from_logits(x), None
    return lambda x: sampling.sampling_from_probs(torch.softmax(x.float(), -1)), None


def versions() -> dict:
    found = {}
    for name in ("torch", "flashinfer"):
        try:
            found[name] = __import__(name).__version__
        except Exception as error:
            found[name] = f"not loaded: {type(error).__name__}"
    return found


def rows_for(shapes, read_GBps: float) -> list[dict]:
    import cupy
    import torch

    rows = []
    for n_rows, n_cols in shapes:
        x = bench.make_rows(n_rows, n_cols, "bfloat16")[0]
        xt = bench.torch_view(x)
        fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": "bfloat16", "bytes": x.nbytes, "op": "sample"}
        for label, params in FILTERS.items():
            tokens = osm.sample(x[:4], generator=11, **params)
            ok, message = compare_with_model(x[:4], tokens, 11, 0, **params)
            here = {**fields, "filter": label}
            if not ok:
                rows.append({"kernel": "sampling_01_rows", "correct": False, "error": message, **here})
                continue
            found = {"sampling_01_rows": lambda: osm.sample(x, generator=11, **params),
                     "torch": lambda: torch_sampler(params)(xt)}
            flashinfer, why = flashinfer_sampler(params)
            if flashinfer is not None:
                found["flashinfer"] = lambda: flashinfer(xt)
            else:
                rows.append({"kernel": "flashinfer", "correct": None, "error": why, **here})
            timed = {}
            for name, fn in found.items():
                try:
                    timing = timer.time_gpu(fn, [()])
                except Exception as error:   # a peer that fails is recorded, not fatal
                    rows.append({"kernel": name, "correct": None, "error": f"{type(error).__name__}: {error}", **here})
                    continue
                timed[name] = timing["ms"]
                one_read_ms = x.nbytes / read_GBps / 1e6
                rows.append({"kernel": name, "method": "device", "correct": True if name == "sampling_01_rows" else None,
                             **timing, **here, "read_fraction": one_read_ms / timing["ms"]})
            for row in rows:
                if row.get("filter") == label and row.get("n_cols") == n_cols and row.get("n_rows") == n_rows \
                        and "ms" in row and "torch" in timed:
                    row["vs_torch"] = timed["torch"] / row["ms"]
            print(f"sample {n_rows}x{n_cols} {label}: " + "  ".join(f"{k} {v * 1e3:.0f} us" for k, v in timed.items()),
                  flush=True)
        del x, xt
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def measure(shapes=SHAPES) -> dict:
    read = timer.read_bandwidth()
    rows = [{"kernel": "read", "bytes_counted": "read", **read}]
    rows += rows_for(shapes, read["GBps"])
    return {"meta": {**results.gpu_meta(), "versions": versions()}, "rows": rows}


if __name__ == "__main__":
    if "--quick" in sys.argv[1:]:
        measure(QUICK)
    else:
        bench.record(SUITE, measure())
