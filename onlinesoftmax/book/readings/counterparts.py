"""The static page's counterpart of each chapter's widget: the same controls over a precomputed table.

A widget recomputes only in a running notebook; on the rendered page these figures answer to their
controls instead, from every setting computed when the page was built (interactive.py draws them).
The numbers come from the kernels' NumPy models and from recorded GPU data, never from a GPU at
build time, so the page is the same wherever it was built; each series says which.

    rows_figure(rows)            chapter 02, the "row x" box: the recurrence beside its definition
    scan_figure(vectors)         chapter 03, the scan one element at a time
    split_figure(x_row)          chapter 04, a row split into chunks and merged
    running_max_figure(scores)   chapter 05, the running maximum over blocks of keys
    topk_figure()                chapter 07, the k probabilities softmax_topk returns
    attention_figure()           chapter 08, blocked attention against the float64 reference
    tensor_core_figure()         chapter 09, a step of the tensor-core ladder: error and wavefronts
    sampling_figure(row)         chapter 13, a row's filtered distribution and the draws of the sampler
    paged_figure()               chapter 13, the pages and busiest blocks of a batch in a paged cache

Chapter 03's kernel explorer and chapter 06's explorer build theirs next to their widgets
(widgets_online.explorer_figure, explorer.explorer_figure).
"""
from __future__ import annotations

import numpy as np

from onlinesoftmax import reference
from onlinesoftmax.book.widgets import widgets_steps
from onlinesoftmax.book.readings.figures import color
from onlinesoftmax.book.widgets.interactive import Figure, select, slider, checkbox

# Series that are not kernels (a kernel's colour comes from the palette, figures.PALETTE)
ELEMENTS, MAXIMUM, SUM, RESCALE, CHOSEN, REFERENCE = ("#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                     "#555555")
MODEL_NOTE = "NumPy model"


def _finite(values):
    return [v if v is not None and np.isfinite(v) else None for v in values]


def rows_figure(rows: list[str]) -> Figure:
    """Chapter 02: the typed rows of the "row x" box, each step of the recurrence beside the
    definition's state of the same prefix (widgets_steps.row_report, in float64)."""
    fig = Figure("row-steps", "The recurrence beside its definition, step by step",
                 [select("row", "row x", rows, rows[0])],
                 caption="float64: reference.online_steps and the definition on each prefix; −∞ is not drawn")
    m_panel = fig.panel("m", x="step n", y="value", title="elements and the maximum mₙ", width=255, height=200)
    l_panel = fig.panel("l", x="step n", y="ℓₙ", title="the running sum ℓₙ", width=255, height=200)
    for row in rows:
        report = widgets_steps.row_report(row)
        if "steps" not in report:
            raise ValueError(f"rows_figure: {row!r} is not a row ({report['message']})")
        steps = report["steps"][1:]
        n = [s["n"] for s in steps]
        when = {"row": row}
        fig.series(m_panel, "elements xₙ", n, _finite([s["x"] for s in steps]), mark="point", color=ELEMENTS,
                   source="setting", when=when)
        fig.series(m_panel, "mₙ, the recurrence", n, _finite([s["m"] for s in steps]), color=MAXIMUM,
                   source="reference", when=when)
        fig.series(m_panel, "mₙ by the definition", n, _finite([s["m_def"] for s in steps]), mark="point",
                   color=REFERENCE, source="definition", when=when)
        fig.series(l_panel, "ℓₙ, the recurrence", n, _finite([s["l"] for s in steps]), color=SUM,
                   source="reference", when=when)
        fig.series(l_panel, "ℓₙ by the definition", n, _finite([s["l_def"] for s in steps]), mark="point",
                   color=REFERENCE, source="definition", when=when)
        fig.note(report["message"], when=when)
    return fig


def scan_figure(vectors: list[str], longest: int = 8) -> Figure:
    """Chapter 03: a vector and a step n; m, ℓ and the rescale factor at every step, the chosen one
    marked, and the update at step n in words (reference.online_steps, float64)."""
    parsed = {v: widgets_steps.parse_row(v)[:longest] for v in vectors}
    most = max(len(x) for x in parsed.values())
    fig = Figure("scan-stepper", "The scan, one element at a time",
                 [select("vector", "vector x", vectors, vectors[0]),
                  slider("n", "element n", 1, most, value=len(parsed[vectors[0]]))],
                 caption="float64: reference.online_steps; a step past the end of a shorter vector shows its last")
    left = fig.panel("m", x="n", y="value", title="elements and the running maximum", width=255, height=200)
    right = fig.panel("l", x="n", y="value", title="the running sum and the rescale factor", width=255, height=200)
    for vector, x in parsed.items():
        all_steps = reference.online_steps(x)
        steps = all_steps[1:]
        ns = [s["n"] for s in steps]
        when = {"vector": vector}
        fig.series(left, "elements xₙ", ns, _finite(x), mark="point", color=ELEMENTS, source="setting", when=when)
        fig.series(left, "running maximum mₙ", ns, _finite([s["m"] for s in steps]), color=MAXIMUM,
                   source="reference", when=when)
        fig.series(right, "ℓₙ", ns, [s["l"] for s in steps], color=SUM, source="reference", when=when)
        fig.series(right, "rescale e^(mₙ₋₁ − mₙ)", ns, _finite([s["rescale"] for s in steps]), mark="point",
                   color=RESCALE, source="reference", when=when, dash=True)
        for n in range(1, most + 1):
            at = min(n, len(x))
            for panel in (left, right):
                fig.series(panel, "step n", xs=[at], mark="rule_x", color=CHOSEN, source="setting",
                           when={**when, "n": n})
            before, now = all_steps[at - 1], all_steps[at]
            f = widgets_steps.fmt
            fig.note(f"step {at}: x = {f(now['x'])}; m: {f(before['m'])} → {f(now['m'])}; rescale = "
                     f"{f(now['rescale'], 6)}; ℓ: {f(before['l'], 6)} × {f(now['rescale'], 6)} + e^(x − m) = "
                     f"{f(now['l'], 6)}", when={**when, "n": n})
    return fig


def split_figure(x_row: np.ndarray, most: int = 32, value: int = 4) -> Figure:
    """Chapter 04: the row cut into 1..`most` chunks, each chunk's maximum, and the merged state next
    to the float64 reference (the kernel's NumPy model, split_merge.partial_states and merge_states)."""
    from onlinesoftmax.kernels.softmax import split_merge as km

    _, l_ref = reference.row_stats(x_row)
    fig = Figure("split-merge", "A row split into chunks and merged", [slider("chunks", "chunks", 1, most, value=value)],
                 caption=f"{MODEL_NOTE} of softmax_06_split_merge (partial_states, merge_states); "
                         f"one row of {x_row.shape[1]} columns")
    panel = fig.panel("maxima", x="chunk", y="chunk maximum m", x_scale="ordinal", width=560, height=200)
    ranges = {}
    for chunks in range(1, most + 1):
        m_p, l_p = km.partial_states(x_row, chunks)
        m_s, l_s = km.merge_states(m_p, l_p)
        ranges[chunks] = [float(m_p[0].min()) - 1, float(m_s[0]) + 1]   # as the widget's axis
        when = {"chunks": chunks}
        fig.series(panel, f"chunk maximum ({MODEL_NOTE})", list(range(chunks)), m_p[0], mark="bar",
                   color=color("softmax_06_split_merge"), when=when)
        fig.series(panel, "merged m", ys=[m_s[0]], mark="rule_y", color=REFERENCE, dash=True, when=when)
        fig.note(f"{chunks} chunks: merged m = {m_s[0]:.4f}, merged ℓ = {l_s[0]:.6f}; float64 reference "
                 f"ℓ = {float(l_ref[0]):.6f}", when=when)
    panel.y_domain_by = ("chunks", ranges)
    return fig


def running_max_blocks(scores: np.ndarray, block: int):
    """(first key of each block, block maxima, running maximum, re-scale factor e^(m_old - m_new))."""
    starts = np.arange(0, len(scores), block)
    block_max = np.array([scores[i:i + block].max() for i in starts])
    running = np.maximum.accumulate(block_max)
    with np.errstate(invalid="ignore"):
        rescale = np.exp(np.concatenate([[-np.inf], running[:-1]]) - running)
    return starts, block_max, running, rescale


def running_max_figure(scores: np.ndarray, blocks=range(16, 513, 16), value: int = 128) -> Figure:
    """Chapter 05: the running maximum of one query's scores over blocks of keys, and the re-scale
    factor each block applies, for every block size of the widget's slider."""
    blocks = list(blocks)
    fig = Figure("running-max", "The running maximum over blocks of keys",
                 [slider("block", "block", blocks[0], blocks[-1], blocks[1] - blocks[0], value=value)],
                 caption=f"float64, one query against {len(scores)} keys")
    panel = fig.panel("max", x="first key of the block", y="score", title="maxima", width=255, height=200)
    factor = fig.panel("rescale", x="first key of the block", y="re-scale factor", title="re-scale per block",
                       width=255, height=200, y_domain=[0, 1.05])
    for block in blocks:
        starts, block_max, running, rescale = running_max_blocks(scores, block)
        when = {"block": block}
        fig.series(panel, "block maximum", starts, block_max, mark="point", color=MAXIMUM, source="reference", when=when)
        fig.series(panel, "running maximum m", starts, running, color=CHOSEN, source="reference", when=when)
        fig.series(factor, "re-scale e^(m_old − m_new)", starts, rescale, mark="point", color="#000000",
                   source="reference", when=when)
        raised = int((rescale[1:] < 1).sum())
        fig.note(f"blocks of {block}: {len(starts)} blocks; {raised} of the {len(starts) - 1} after the first raise "
                 f"the running maximum (re-scale < 1)", when=when)
    return fig


def topk_figure(n_options=(8, 64, 256, 1000, 32000, 128256), dtypes=("float32", "float16", "bfloat16"),
                seed: int = 0, shown: int = 60, k_options=(1, 2, 5, 8, 10, 16, 20, 32)) -> Figure:
    """Chapter 07: one row of random logits (normal, scale 2, as the widget draws), the k probabilities
    softmax_topk's NumPy model returns, over the row's whole softmax in float64, sorted. The model runs
    once per choice offered (N x dtype x k x renormalize), so k takes a few values, not all 32."""
    import onlinesoftmax
    from onlinesoftmax import checks
    from onlinesoftmax.kernels.topk import softmax_topk as kt
    from onlinesoftmax.topk import choose

    fig = Figure("topk-choice", "The k probabilities softmax_topk returns, over the whole row",
                 [select("N", "N", list(n_options), 1000), select("k", "k", list(k_options), 5),
                  select("dtype", "dtype", list(dtypes), "float32"), checkbox("renormalize", "renormalize")],
                 digits=3, caption=f"{MODEL_NOTE} of softmax_topk on one row; the row's softmax in float64 (its largest {shown})")
    panel = fig.panel("probabilities", x="rank (largest probability first)", y="probability", x_scale="ordinal",
                      y_scale="log", width=560, height=230)
    for n_cols in n_options:
        for dtype in dtypes:
            x = checks.from_float32((np.random.default_rng(seed).standard_normal((1, n_cols)) * 2)
                                    .astype(np.float32), dtype)
            full = np.sort(reference.softmax(np.asarray(checks.as_float64(x)))[0])[::-1]
            ranked = full[:max(shown, kt.MAX_K)]
            fig.series(panel, "softmax(x) in float64, sorted (the rest of the row)", range(len(ranked)), ranked,
                       mark="bar", color=color("numpy"), source="reference", when={"N": n_cols, "dtype": dtype})
            fig.note(f"N = {n_cols}, {dtype}: the row's largest {len(ranked)} probabilities sum to {ranked.sum():.4f}",
                     when={"N": n_cols, "dtype": dtype})
            for k_asked in k_options:
                k = min(k_asked, n_cols)
                name = choose(1, n_cols, k, dtype).variant.name   # the kernel variant="auto" picks for one row
                for renormalize in (False, True):
                    probs, _ = onlinesoftmax.softmax_topk(x, k, renormalize=renormalize)
                    probs = np.asarray(checks.as_float64(probs))[0]
                    when = {"N": n_cols, "dtype": dtype, "k": k_asked, "renormalize": renormalize}
                    fig.series(panel, f"{name}: the k returned ({MODEL_NOTE})", range(k), probs, mark="bar_narrow",
                               color=color(name), when=when)
                    fig.note(f"the k = {k} returned sum to {probs.sum():.4f}", when=when, slot=1)
    return fig


def attention_figure(n_q_options=(1, 8, 64, 200), n_k_options=(1, 64, 200, 512), seed_base=1000) -> Figure:
    """Chapter 08: onlinesoftmax.attention's NumPy model (blocked forward) against the float64
    reference on random inputs, 2 query heads over 1 key/value head, error per query row."""
    import onlinesoftmax
    from onlinesoftmax.kernels.attention import blocked as ab

    ds = list(ab.SUPPORTED_D)
    fig = Figure("attention-try", "Blocked attention against the float64 reference, per query row",
                 [select("n_q", "n_q", list(n_q_options), 64 if 64 in n_q_options else n_q_options[-1]),
                  select("n_k", "n_k", list(n_k_options), 200 if 200 in n_k_options else n_k_options[-1]),
                  select("d", "d", ds, 64 if 64 in ds else ds[0]), checkbox("causal", "causal", True)],
                 caption=f"{MODEL_NOTE} of the blocked forward, float32 inputs; the largest error over heads and d",
                 digits=2)
    out_panel = fig.panel("out", x="query row", y="max |O − reference|", title="output O", width=255, height=200,
                          y_zero=True, y_format=".1e")
    lse_panel = fig.panel("lse", x="query row", y="|LSE − reference|", title="log-sum-exp", width=255, height=200,
                          y_zero=True, y_format=".1e")
    for n_q in n_q_options:
        for n_k in n_k_options:
            for d in ds:
                for causal in (False, True):
                    rng = np.random.default_rng(seed_base * n_q + n_k + d)
                    q = rng.standard_normal((1, 2, n_q, d)).astype(np.float32)
                    k, v = (rng.standard_normal((1, 1, n_k, d)).astype(np.float32) for _ in range(2))
                    out, lse = onlinesoftmax.attention(q, k, v, causal=causal, return_lse=True)
                    out_ref, lse_ref = ab.reference(q, k, v, causal=causal)
                    blind = np.isneginf(lse_ref[0, 0])
                    assert blind[:int(blind.sum())].all(), "the rows that see no key come first"
                    rows = np.arange(n_q)
                    err = np.abs(out - out_ref).max(axis=(0, 1, 3))
                    finite = np.isfinite(lse_ref).all(axis=(0, 1))
                    with np.errstate(invalid="ignore"):
                        lse_err = np.where(finite, np.abs(np.where(finite, lse - lse_ref, 0)).max(axis=(0, 1)), np.nan)
                    when = {"n_q": n_q, "n_k": n_k, "d": d, "causal": causal}
                    seen = ~blind
                    label = f"rows that see a key ({MODEL_NOTE})"
                    fig.series(out_panel, label, rows[seen], err[seen], mark="point",
                               color=color("attention_01_blocked"), when=when)
                    fig.series(lse_panel, label, rows[seen], lse_err[seen], mark="point",
                               color=color("attention_01_blocked"), when=when)
                    if blind.any():
                        for panel in (out_panel, lse_panel):
                            fig.series(panel, "rows that see no key (O = 0, LSE = −∞)", [-0.5],
                                       mark="band_x", x2s=[int(blind.sum()) - 0.5], color=CHOSEN,
                                       source="setting", when=when)
                    zero = bool((out[0][:, blind] == 0).all() and np.isneginf(lse[0][:, blind]).all())
                    fig.note(f"{MODEL_NOTE}: max |O − reference| = {err.max():.2e}, max |LSE − reference| = "
                             f"{np.nanmax(lse_err) if seen.any() else 0.0:.2e} (rows that see a key)\nrows that "
                             f"see no key: {int(blind.sum())} of {n_q}; all-zero and −∞ there: {zero}", when=when)
    return fig


def tensor_core_figure(n_q_options=(1, 50, 100, 200, 300), n_k_options=(1, 64, 150, 300)) -> Figure:
    """Chapter 09: the tensor-core kernels' NumPy model (mma.simulate for the three 16-row
    steps, which compute the same numbers; simulate_reuse for attention_07) against the float64
    reference on the widget's random bf16 inputs, 2 query heads over 1 key/value head, error per
    query row (0 where a row sees no key: both are 0 there); and the shared-memory wavefronts of
    the chosen step's ldmatrix loads per 16 query rows and 64 keys (tile_wavefronts for the 16-row
    steps; for attention_07 counted from its loads: two m-tiles of Q, K and V per key tile)."""
    from onlinesoftmax import checks
    from onlinesoftmax.kernels.attention import blocked as ab
    from onlinesoftmax.kernels.attention import mma as am
    from onlinesoftmax.kernels.attention import mma_fragments as mf

    steps = {3: am.MMA, 4: am.LDMATRIX, 5: am.PIPELINED, 7: am.FRAGMENT_REUSE}
    ds = list(am.SUPPORTED_D)
    fig = Figure("tensor-cores-try", "A step of the tensor-core ladder: error and shared-memory wavefronts",
                 [select("n_q", "n_q", list(n_q_options), 100 if 100 in n_q_options else n_q_options[-1]),
                  select("n_k", "n_k", list(n_k_options), 150 if 150 in n_k_options else n_k_options[-1]),
                  select("d", "d", ds, 64), checkbox("causal", "causal", True),
                  select("step", "step", list(steps), 4, labels=[f"{s:02d} {v.short}" for s, v in steps.items()])],
                 caption=f"{MODEL_NOTE} of the kernels, bf16 inputs; wavefronts counted from the addresses "
                         "the kernels compute", digits=3)
    out_panel = fig.panel("out", x="query row", y="max |O − reference|", title="output O", width=300, height=200,
                          y_zero=True, y_format=".1e")
    wave_panel = fig.panel("wavefronts", x="loads of", y="wavefronts per 16 rows and 64 keys", x_scale="ordinal",
                           title="shared memory, one key tile", width=200, height=200, y_zero=True)
    waves = {}
    for step, variant in steps.items():
        for d in ds:
            if step == 7:   # per warp and key tile: Q 2 d/16 ldmatrix.x4, K and V keys/16 d/16; 4 wavefronts each
                keys = am.block_keys(variant.name, d)
                per = (16 / am.warp_rows(variant.name)) * (64 / keys)      # to 16 rows and 64 keys
                waves[step, d] = {"Q": 4 * 2 * d // 16 * per, "K": 4 * keys // 16 * d // 16 * per,
                                  "V": 4 * keys // 16 * d // 16 * per}
            else:
                counts = mf.tile_wavefronts(min(step, 4), d)
                waves[step, d] = {"K": counts["K"]["wavefronts"], "V": counts["V"]["wavefronts"]}
            fig.series(wave_panel, f"{variant.name} (shared-memory model)", list(waves[step, d]),
                       list(waves[step, d].values()), mark="bar", when={"step": step, "d": d})
    for n_q in n_q_options:
        for n_k in n_k_options:
            for d in ds:
                rng = np.random.default_rng(n_q * 1000 + n_k + d)   # the widget's inputs (the chapter's qkv)
                q, k, v = (checks.to_dtype(rng.standard_normal(shape).astype(np.float32), "bfloat16")
                           for shape in ((1, 2, n_q, d), (1, 1, n_k, d), (1, 1, n_k, d)))
                for causal in (False, True):
                    out, _ = am.simulate(q, k, v, causal=causal)
                    ref, lse_ref = ab.reference(*(np.asarray(a, np.float32) for a in (q, k, v)), causal=causal)
                    err = np.abs(checks.as_float64(out) - ref).max(axis=(0, 1, 3))
                    reuse, _ = am.simulate_reuse(q, k, v, causal=causal)
                    err_reuse = float(np.abs(checks.as_float64(reuse) - ref).max())
                    blind = np.isneginf(lse_ref[0, 0])
                    when = {"n_q": n_q, "n_k": n_k, "d": d, "causal": causal}
                    fig.series(out_panel, f"rows that see a key ({MODEL_NOTE})", np.arange(n_q)[~blind], err[~blind],
                               mark="point", color=MAXIMUM, when=when)
                    if blind.any():   # points, not a band: a layer that empties and fills again redraws otherwise
                        fig.series(out_panel, f"rows that see no key (O = 0 exactly, {MODEL_NOTE})", np.arange(n_q)[blind],
                                   err[blind], mark="point", color=CHOSEN, when=when)
                    for step, variant in steps.items():
                        w = waves[step, d]
                        fig.note(f"{variant.name}, {MODEL_NOTE}: max |O − reference| = "
                                 f"{err_reuse if step == 7 else err.max():.2e}; rows that see no key: {int(blind.sum())} "
                                 f"of {n_q}\nshared-memory wavefronts per 16 rows and 64 keys: {sum(w.values()):.0f} for "
                                 f"{', '.join(w)}", when={**when, "step": step})
    return fig


SAMPLING_SETTINGS = {"temperature": (0.5, 1.0, 2.0), "top_k": (0, 3, 8), "top_p": (1.0, 0.9, 0.6),
                     "min_p": (0.0, 0.05, 0.2)}


def sampling_figure(row: np.ndarray, draws: int = 20000, seed: int = 0) -> Figure:
    """The sampling chapter: one row's distribution after temperature, top-k, top-p and min-p (float64),
    beside the frequencies of `draws` tokens drawn by sampling_01_rows' NumPy model, for every
    setting of the widget's four controls."""
    from onlinesoftmax.kernels.sampling import rows as ks

    s = SAMPLING_SETTINGS
    fig = Figure("sampling", "What a row samples from, and what was drawn",
                 [select(name, name, values, values[1] if name == "temperature" else values[0],
                         labels=["off" if v in (0, 1.0) and name != "temperature" else v for v in values])
                  for name, values in s.items()],
                 digits=4, caption=f"float64 distribution; {draws} draws of the {MODEL_NOTE} of sampling_01_rows")
    panel = fig.panel("p", x="token", y="probability", width=560, height=230, y_zero=True)
    tokens = np.arange(row.size)
    repeated = np.repeat(row[None, :].astype(np.float32), draws, axis=0)
    for t in s["temperature"]:
        for k in s["top_k"]:
            for p in s["top_p"]:
                for q in s["min_p"]:
                    params = {"temperature": t, "top_k": k, "top_p": p, "min_p": q}
                    when = dict(params)
                    exact = ks.distribution(row[None, :], **params)[0]
                    drawn = np.bincount(ks.simulate(repeated, seed, 0, **params), minlength=row.size) / draws
                    fig.series(panel, "probability (float64)", tokens, exact, mark="bar", color=REFERENCE,
                               source="reference", when=when)
                    fig.series(panel, "frequency drawn", tokens, drawn, mark="point",
                               color=color("sampling_01_rows"), source="model", when=when)
                    fig.note(f"{int((exact > 0).sum())} of {row.size} tokens kept", when=when)
    return fig


def paged_figure(page_sizes=(1, 16, 256), batches=(1, 8, 64), seed: int = 0) -> Figure:
    """The paged-decode page: for sequences of lengths between 1K and 128K keys, the pages each one
    takes and the keys of its busiest block beside an even share of all the keys over the same blocks
    (attention_08_paged_decode's rule, 32 heads over 8 kv heads on the H200's SMs), for every page
    size and batch of the widget's controls."""
    from onlinesoftmax.kernels.attention import paged

    lengths = np.exp(np.random.default_rng(seed).uniform(np.log(1024), np.log(131072), max(batches))).astype(int)
    fig = Figure("paged", "Pages and the busiest block per sequence of a batch",
                 [select("page_size", "page size", list(page_sizes), 16), select("batch", "batch", list(batches), 8)],
                 caption="attention_08_paged_decode's page and split rules; lengths drawn between 1K and 128K keys; "
                         "an even share is all the keys over batch × base splits blocks")
    pages_panel = fig.panel("pages", x="sequence", y="pages", title="pages it takes (page-table entries)",
                            y_scale="log", width=255, height=200)
    keys_panel = fig.panel("keys", x="sequence", y="keys", title="keys of its busiest block", y_scale="log",
                           width=255, height=200)
    for batch in batches:
        base, _, most = paged.plan_splits(batch, 32, 8, 1, 131072, 132)
        n = lengths[:batch]
        busiest, even = paged.block_keys(n, base, most)
        fig.series(keys_panel, "keys of its busiest block", np.arange(batch), busiest, mark="point", color=CHOSEN,
                   source="model", when={"batch": batch})
        fig.series(keys_panel, "an even share", ys=[even], mark="rule_y", color=REFERENCE, dash=True, source="model",
                   when={"batch": batch})
        for page_size in page_sizes:
            when = {"page_size": page_size, "batch": batch}
            fig.series(pages_panel, "pages", np.arange(batch), -(-n // page_size), mark="point",
                       color=color("attention_08_paged_decode"), source="model", when=when)
            fig.note(f"batch {batch}: {base} split{'s' * (base > 1)} per (sequence, kv head) on average, the busiest "
                     f"block reading {max(busiest) / even:.1f} times an even share; "
                     f"{int((-(-n // page_size)).sum())} pages in all", when=when)
    return fig
