"""Suite `serving`: sampling one token per row of logits, and decoding against a paged KV cache, against
what a server would run instead.

At batch x vocabulary in SHAPES (bf16 logits) and each filter in FILTERS, on the same logits:
  sampling_01_rows    onlinesoftmax.sample(x, ..., variant="rows"): one kernel, a block per row, no sort
  sampling_02_split   onlinesoftmax.sample(x, ..., variant="split"): a row's chunks over blocks, a launch
                      per pass; its tokens checked equal to sampling_01_rows' on the whole batch first
  torch_sort_sample   what vLLM's sampler does in torch: softmax -> sort -> cumsum -> mask -> multinomial
                      (top-p), softmax -> mask below min_p x max -> multinomial (min-p), softmax ->
                      multinomial (plain)
  flashinfer          FlashInfer's sort-free samplers (flashinfer.sampling), from logits where it has a
                      function for it, else from torch.softmax's probabilities; where it imports
`method` "device" (timer.time_gpu: the median over calls, L2 flushed before each). `read_fraction`
is the time of one read of the logits at the read bandwidth measured in the same run, divided by the
call's time (1.0: the call costs one read of the logits). Ours is checked against its NumPy model
(sampling_checks.compare_with_model: the same noise and thresholds) on 4 rows before it is timed.
Targets: >= 5x torch's path, and within 1.3x of one read where the logits are >= 64 MB.

Paged decode (op "paged_decode"), bf16, d = 128, 32 heads over 8 kv heads, one query per sequence, at
page sizes PAGE_SIZES and batches DECODE_BATCHES with lengths drawn between 1K and 128K keys:
  attention_08_paged_decode   onlinesoftmax.attention(q, kv_cache=..., page_table=..., cache_lengths=...)
  attention_06_decode_mma     the contiguous cache of the same keys (every sequence of one length,
                              rows "equal lengths": the paged kernel on the same data beside it)
`read_fraction`: the bytes of K and V read (the sum of the lengths) over the call's time, divided by the
read bandwidth of the same run. Each call includes the host's check of the pages and lengths (one
synchronization), as the API does; "unchecked" rows the call with check_cache=False (no host check, no
synchronization); "kernels only" rows time the runner alone. Checked against the
float64 reference on two sequences (capped at 4096 keys) before timing.

Prefill of packed prompts of different lengths (op "varlen_prefill"): serving_prefill.py.

    python -m onlinesoftmax.bench serving [--quick] [--only sample|decode|prefill]
    (GPU and torch with CUDA; --quick: printed only; --only PART: that part alone, recorded as serving-PART)
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


def flashinfer_sampler(params: dict, n_cols: int):
    """FlashInfer's sampler for these parameters as a function of the logits, or (None, why not). Its
    top-k + top-p call at 65,536 classes and more takes a path through its radix top-k module, whose
    just-in-time build on the GPU machine outlasts a benchmark call: not timed there."""
    try:
        import torch
        from flashinfer import sampling
    except Exception as error:   # not installed, or its kernels do not load here
        return None, f"{type(error).__name__}: {error}"
    if "top_k" in params and "top_p" in params and n_cols >= 65536:
        return None, "not timed: at >= 65536 classes FlashInfer's top_k_first path JIT-builds its top-k module"
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


def time_calls(found: dict, here: dict, bytes_read: int, read_GBps: float, ours: str) -> tuple[list[dict], dict]:
    """Rows of device times of each call in `found` (a peer that fails is recorded, not fatal), with the
    read fraction of `bytes_read`; and {name: ms}."""
    rows, timed = [], {}
    for name, fn in found.items():
        try:
            timing = timer.time_gpu(fn, [()])
        except Exception as error:
            rows.append({"kernel": name, "correct": None, "error": f"{type(error).__name__}: {error}", **here})
            continue
        timed[name] = timing["ms"]
        rows.append({"kernel": name, "method": "device", "correct": True if name.startswith(ours) else None, **timing,
                     **here, "GBps": bytes_read / timing["ms"] / 1e6,
                     "read_fraction": bytes_read / timing["ms"] / 1e6 / read_GBps})
    return rows, timed


def sample_shape(n_rows: int, n_cols: int, read_GBps: float) -> list[dict]:
    """Every filter at one shape: ours checked against its model, then ours and the peers timed."""
    x = bench.make_rows(n_rows, n_cols, "bfloat16")[0]
    xt = bench.torch_view(x)
    fields = {"n_rows": n_rows, "n_cols": n_cols, "dtype": "bfloat16", "bytes": x.nbytes, "op": "sample"}
    rows = []
    for label, params in FILTERS.items():
        here = {**fields, "filter": label}
        tokens = osm.sample(x[:4], generator=11, **params)
        ok, message = compare_with_model(x[:4], tokens, 11, 0, **params)
        if not ok:
            rows.append({"kernel": "sampling_01_rows", "correct": False, "error": message, **here})
            continue
        found = {"sampling_01_rows": lambda: osm.sample(x, generator=11, variant="rows", **params),
                 "sampling_02_split": lambda: osm.sample(x, generator=11, variant="split", **params),
                 "torch_sort_sample": lambda: torch_sampler(params)(xt)}
        if not bool((found["sampling_01_rows"]() == found["sampling_02_split"]()).all()):
            rows.append({"kernel": "sampling_02_split", "correct": False, "error": "tokens differ from "
                         "sampling_01_rows'", **here})
            del found["sampling_02_split"]
        flashinfer, why = flashinfer_sampler(params, n_cols)
        if flashinfer is not None:
            found["flashinfer"] = lambda: flashinfer(xt)
        else:
            rows.append({"kernel": "flashinfer", "correct": None, "error": why, **here})
        timed_rows, timed = time_calls(found, here, x.nbytes, read_GBps, "sampling_0")
        for row in timed_rows:
            if "torch_sort_sample" in timed:
                row["vs_torch"] = timed["torch_sort_sample"] / row["ms"]
        rows += timed_rows
        print(f"sample {n_rows}x{n_cols} {label}: " + "  ".join(f"{k} {v * 1e3:.0f} us" for k, v in timed.items()),
              flush=True)
    return rows


def rows_for(shapes, read_GBps: float) -> list[dict]:
    import cupy
    import torch

    rows = []
    for n_rows, n_cols in shapes:
        rows += sample_shape(n_rows, n_cols, read_GBps)
        torch.cuda.empty_cache()
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


PAGE_SIZES = (16, 256)
DECODE_BATCHES = (1, 8, 64)
HEADS, KV_HEADS, D = 32, 8, 128


def paged_inputs(batch: int, page_size: int, lengths, seed: int = 0):
    """q and a paged cache holding exactly the given lengths: each sequence's pages in a shuffled order
    in one pool (table entries past a sequence's pages are -1, never read)."""
    import cupy

    from onlinesoftmax import checks

    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths, np.int64)
    pages_of = -(-lengths // page_size)
    n_pages, per_seq = int(pages_of.sum()), int(pages_of.max())
    order = rng.permutation(n_pages).astype(np.int32)
    table = np.full((batch, per_seq), -1, np.int32)
    starts = np.r_[0, np.cumsum(pages_of)[:-1]]
    for b in range(batch):
        table[b, :pages_of[b]] = order[starts[b]:starts[b] + pages_of[b]]
    gen = cupy.random.default_rng(seed)
    q = checks.from_float32(gen.standard_normal((batch, HEADS, 1, D), dtype=cupy.float32), "bfloat16")
    pools = [checks.from_float32(gen.standard_normal((n_pages, page_size, KV_HEADS, D), dtype=cupy.float32),
                                 "bfloat16") for _ in range(2)]
    return q, pools, cupy.asarray(table), cupy.asarray(lengths.astype(np.int32))


def decode_case(batch: int, page_size: int, lens, label: str, read_GBps: float) -> list[dict]:
    """One batch of a paged cache: ours checked on two sequences against float64, then timed (with the
    API's host check, and the kernels alone), beside the contiguous kernel where every length is equal."""
    import cupy

    from onlinesoftmax.attention_paged import paged_attention
    from onlinesoftmax.checks import host
    from onlinesoftmax.kernels.attention import paged
    from onlinesoftmax.runtime.plan import get_runner

    q, (kp, vp), table, n = paged_inputs(batch, page_size, lens)
    kv_bytes = int(lens.sum()) * KV_HEADS * D * 2 * 2
    here = {"op": "paged_decode", "dtype": "bfloat16", "d": D, "heads": HEADS, "kv_heads": KV_HEADS, "batch": batch,
            "page_size": page_size, "lengths": label, "kv_bytes": kv_bytes, "mean_length": float(lens.mean())}
    few = min(2, batch)
    capped = cupy.minimum(n[:few], 4096)
    out, lse = paged_attention(q[:few], kp, vp, table[:few], capped, return_lse=True)
    needed = cupy.asnumpy(table[:few, :-(-4096 // page_size)])           # the pages the check reads, alone
    picked = cupy.asarray(np.maximum(needed, 0).ravel())
    small = np.arange(needed.size, dtype=np.int32).reshape(needed.shape)
    ok, message = paged.compare(host(out), cupy.asnumpy(lse), host(q[:few]), host(kp[picked]), host(vp[picked]),
                                small, cupy.asnumpy(capped))
    if not ok:
        return [{"kernel": paged.NAME, "correct": False, "error": message, **here}]
    options = {"k_pages": kp, "v_pages": vp, "page_table": table, "cache_lengths": n, "lse": None, "causal": False,
               "scale": 1 / np.sqrt(D)}
    result = cupy.empty_like(q)
    runner = get_runner(osm.REGISTRY[paged.NAME], q, result, options)
    found = {paged.NAME: lambda: paged_attention(q, kp, vp, table, n),
             f"{paged.NAME} (unchecked)": lambda: paged_attention(q, kp, vp, table, n, check_cache=False),
             f"{paged.NAME} (kernels only)": lambda: runner(q, result, **options)}
    if label == "equal lengths":   # the same keys, contiguous
        k = cupy.ascontiguousarray(cupy.stack([kp[table[b]].reshape(-1, KV_HEADS, D)[:lens[b]].transpose(1, 0, 2)
                                               for b in range(batch)]))
        v = cupy.ascontiguousarray(cupy.stack([vp[table[b]].reshape(-1, KV_HEADS, D)[:lens[b]].transpose(1, 0, 2)
                                               for b in range(batch)]))
        found["attention_06_decode_mma"] = lambda: osm.attention(q, k, v, variant="decode_mma")
    rows, timed = time_calls(found, here, kv_bytes, read_GBps, paged.NAME)
    for row in rows:
        if "attention_06_decode_mma" in timed and "ms" in row:
            row["vs_contiguous"] = timed["attention_06_decode_mma"] / row["ms"]
    print(f"paged decode page {page_size} batch {batch} {label}: " + "  ".join(
        f"{k} {v * 1e3:.0f} us" for k, v in timed.items()), flush=True)
    return rows


def decode_rows(read_GBps: float) -> list[dict]:
    import cupy

    rows = []
    rng = np.random.default_rng(7)
    for page_size in PAGE_SIZES:
        for batch in DECODE_BATCHES:
            mixed = np.exp(rng.uniform(np.log(1024), np.log(131072), batch)).astype(np.int32)
            for label, lens in (("mixed lengths", mixed), ("equal lengths", np.full(batch, 32768, np.int32))):
                rows += decode_case(batch, page_size, lens, label, read_GBps)
                cupy.get_default_memory_pool().free_all_blocks()
    return rows


PARTS = ("sample", "decode", "prefill")


def measure(shapes=SHAPES, parts=PARTS) -> dict:
    from onlinesoftmax.bench.serving_prefill import prefill_rows

    read = timer.read_bandwidth()
    rows = [{"kernel": "read", "bytes_counted": "read", **read}]
    if "sample" in parts:
        rows += rows_for(shapes, read["GBps"])
    if "decode" in parts:
        rows += decode_rows(read["GBps"])
    if "prefill" in parts:
        rows += prefill_rows()
    return {"meta": {**results.gpu_meta(), "versions": versions(), "parts": list(parts)}, "rows": rows}


if __name__ == "__main__":
    args = sys.argv[1:]
    parts = PARTS
    if "--only" in args:
        parts = (args[args.index("--only") + 1],)
        if parts[0] not in PARTS:
            raise SystemExit(f"--only takes one of {', '.join(PARTS)}, got {parts[0]!r}")
    if "--quick" in args:
        measure(QUICK, parts=("sample",))
    else:
        bench.record(SUITE if parts == PARTS else f"{SUITE}-{parts[0]}", measure(parts=parts))
