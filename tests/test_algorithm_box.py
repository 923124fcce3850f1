"""Chapter 08's algorithm boxes read against the kernels they describe: the FlashAttention-2 forward
(attention_01_blocked.cu) and split-K decoding (attention_02_decode_split.cu with decode_merge.cuh).

Each step of the box is paired with the line of kernels/attention/attention_01_blocked.cu that does
it: the box's words must be on the page and the kernel's code in the source, so a step dropped from
either side fails here. Then the box is run as written, in float64, with the kernel's own tiles
(read from its #defines), against the float64 attention reference: causal (bottom-right) and not,
with query rows that see no key. The wrong answers kept: a box without a step, a kernel without the
rescale of its output, a box run that forgets that rescale, a kernel whose causal bound counts from
the tile's first row.
"""
import re
from pathlib import Path

import numpy as np
import pytest

from onlinesoftmax.book.readings import attention_tiles
from onlinesoftmax.kernels.attention import blocked as ab

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "chapters" / "08_blocked_attention.md"
DECODE_PAGE = ROOT / "chapters" / "08_decode_split.md"
DECODE_SOURCES = [ROOT / "kernels" / "attention" / "attention_02_decode_split.cu", ROOT / "kernels" / "common" / "decode_merge.cuh"]

# (step, words of the box, the kernel's code for it: a regular expression over its source)
STEPS = [
    ("a block per query tile", r"each query tile $Q_i$ of $B_q$ rows, in parallel (one thread block)",
     r"q0 = blockIdx\.x \* BLOCK_Q"),
    ("the state set", r"set $m = -\infty$, $\ell = 0$, $O = 0$",
     r"m\[i\] = neg_inf\(\); l\[i\] = 0\.0f;.*?o\[i\]\[c\] = 0\.0f"),
    ("key tiles in order, causal bound", r"for each key tile $j = 0, 1, \dots$ of $B_k$ keys, in order (causal: "
     r"only the tiles holding a key the tile's last row can see)",
     r"last_row = min\(q0 \+ BLOCK_Q, n_q\) - 1;.*?kv_end = causal \? min\(n_k, last_row \+ 1 \+ n_k - n_q\) : n_k;"
     r".*?for \(int k0 = 0; k0 < kv_end; k0 \+= BLOCK_K\)"),
    ("K and V loaded", r"load $K_j$ and $V_j$ into shared memory", r"Kt\[d \* LD \+ j\] = .*?Vs\[j \* D \+ d\] = "),
    ("scores, masked", r"with $-\infty$ where a row may not see a key",
     r"if \(k0 \+ 4 \* tx \+ j >= limit\) s\[i\]\[j\] = neg_inf\(\);"),
    ("the new maximum", r"$m' = \max(m, \operatorname{rowmax} S)$", r"m_new = fmaxf\(m\[i\], tile_max\);"),
    ("the all-masked guard", r"has $m' = -\infty$ and subtracts $0$ instead",
     r"base = m_new == neg_inf\(\) \? 0\.0f : m_new;"),
    ("the tile's exponentials", r"$\tilde P = e^{S - m'}$", r"s\[i\]\[j\] = exp2f\(s\[i\]\[j\] - base\);"),
    ("the sum rescaled", r"$\ell \leftarrow e^{m - m'} \ell + \operatorname{rowsum} \tilde P$",
     r"alpha = exp2f\(m\[i\] - base\);\s*l\[i\] = l\[i\] \* alpha \+ row_sum;"),
    ("the output rescaled and added", r"$O \leftarrow e^{m - m'} O + \tilde P V_j$, $m \leftarrow m'$",
     r"o\[i\]\[c\] \*= alpha;\s*m\[i\] = m_new;.*?o\[i\]\[c\] = fmaf\(pr\[i\], vj, o\[i\]\[c\]\)"),
    ("O / l written", r"write $O / \ell$", r"inv = l\[i\] != 0\.0f \? 1\.0f / l\[i\] : 0\.0f;.*?o\[i\]\[c\] \* inv"),
    ("LSE written", r"$\operatorname{LSE} = m + \ln \ell$", r"\(m\[i\] \+ log2f\(l\[i\]\)\) \* 0\.69314718056f"),
    ("a row that saw no key", r"($0$ and $-\infty$ for a row with $\ell = 0$",
     r"l\[i\] != 0\.0f \? \(m\[i\] \+ log2f\(l\[i\]\)\) \* 0\.69314718056f : neg_inf\(\)"),
]


# The decode page: its merge formulas (displayed just above the box) and the box's two steps.
DECODE_STEPS = [
    ("a block per range", r"In parallel, one block per range $s$: run the loop of the blocked forward over the keys "
     r"of its range only", r"const int split = blockIdx\.x, splits = gridDim\.x;"),
    ("O_s and LSE_s written", r"write its normalized output $O_s$ and its $\operatorname{LSE}_s$",
     r"o_part\[\(\(long long\)split \* n_rows \+ out_index\) \* D \+ d\] = value;\s*"
     r"if \(d == 0\) lse_part\[\(long long\)split \* n_rows \+ out_index\] = row_lse;"),
    ("M, the largest LSE_s", r"M = \max_s \operatorname{LSE}_s", r"batch_max = fmaxf\(batch_max, part_lse\[i\]\);"),
    ("each range weighed", r"\sum_s e^{\operatorname{LSE}_s - M} O_s",
     r"weight = exp2f\(part_lse\[i\] - base\);\s*//[^\n]*\s*total \+= weight;\s*acc = fmaf\(weight, part_o\[i\], acc\);"),
    ("O and LSE written", r"\operatorname{LSE} = M + \ln \sum_s e^{\operatorname{LSE}_s - M}",
     r"acc / total.*?\(mm \+ log2f\(total\)\) \* 0\.69314718056f"),
    ("a second kernel, a block per query row", r"a second, small kernel merges the ranges with the formulas above, "
     r"one block per query row", r"const long long row = blockIdx\.x, n_rows = gridDim\.x;"),
    ("one range: no merge", r"With a single range, step 1 writes the output itself and no merge runs",
     r"if \(splits == 1\) \{\s*out\[out_index \* D \+ d\] = Row::from_float\(value\);"),
]


def box_text(page: str, title: str = "the blocked attention forward") -> str:
    """The algorithm box of the page with that title, whitespace collapsed."""
    found = re.search(r"```\{admonition\} Algorithm: " + re.escape(title) + r".*?\n```", page, re.S)
    assert found, f"no algorithm box for {title}"
    return " ".join(found.group(0).split())


def missing_steps(box: str, source: str, steps=STEPS) -> list[str]:
    return [f"{step}: {'box' if words not in box else 'kernel'}" for step, words, code in steps
            if words not in box or not re.search(code, source, re.S)]


def decode_box() -> str:
    """The decode page's box with the merge formulas displayed above it, whitespace collapsed."""
    page = DECODE_PAGE.read_text()
    formulas = re.search(r"\$\$\s*M = \\max_s.*?\$\$", page, re.S)
    assert formulas, "the decode page lost its merge formulas"
    return " ".join(formulas.group(0).split()) + " " + box_text(page, "split-K decoding")


def test_every_step_of_the_decode_box_is_a_line_of_its_kernels():
    source = "\n".join(path.read_text() for path in DECODE_SOURCES)
    assert missing_steps(decode_box(), source, DECODE_STEPS) == []
    # wrong answers: the merge weighing every range alike, the box without its one-range rule
    assert missing_steps(decode_box(), source.replace("exp2f(part_lse[i] - base)", "1.0f"), DECODE_STEPS) == \
        ["each range weighed: kernel"]
    assert missing_steps(decode_box().replace("With a single range", "With one range"), source, DECODE_STEPS) == \
        ["one range: no merge: box"]


def test_every_step_of_the_box_is_a_line_of_the_kernel():
    assert missing_steps(box_text(PAGE.read_text()), attention_tiles.SOURCE.read_text()) == []


def test_a_step_missing_from_either_side_is_seen():
    box, source = box_text(PAGE.read_text()), attention_tiles.SOURCE.read_text()
    assert missing_steps(box.replace(r"$O \leftarrow e^{m - m'} O", r"$O \leftarrow O"), source) == \
        ["the output rescaled and added: box"]
    assert missing_steps(box, source.replace("o[i][c] *= alpha;", "")) == ["the output rescaled and added: kernel"]
    assert missing_steps(box, source.replace("last_row + 1 + n_k - n_q", "q0 + 1 + n_k - n_q")) == \
        ["key tiles in order, causal bound: kernel"]


def run_box(q, k, v, causal: bool, block_q: int, block_k: int, rescale_output: bool = True):
    """The box, step by step, in float64 for one head: (O, LSE)."""
    n_q, d = q.shape
    n_k = k.shape[0]
    visible = np.arange(n_q) + 1 + n_k - n_q if causal else np.full(n_q, n_k)   # query i sees keys j < visible[i]
    out, lse = np.zeros((n_q, d)), np.zeros(n_q)
    for q0 in range(0, n_q, block_q):                                   # each query tile (a block)
        rows = slice(q0, min(q0 + block_q, n_q))
        m, l, o = np.full(rows.stop - q0, -np.inf), np.zeros(rows.stop - q0), np.zeros((rows.stop - q0, d))  # step 1
        kv_end = min(n_k, visible[rows.stop - 1]) if causal else n_k   # up to the last row's first unseen key
        for k0 in range(0, max(kv_end, 0), block_k):                     # step 2, in order
            cols = np.arange(k0, min(k0 + block_k, n_k))                # 2.1
            s = np.where(cols[None, :] < visible[rows, None], q[rows] @ k[cols].T / np.sqrt(d), -np.inf)   # 2.2
            m_new = np.maximum(m, s.max(axis=1))                        # 2.3
            base = np.where(m_new == -np.inf, 0.0, m_new)
            p = np.exp(s - base[:, None])
            alpha = np.exp(m - base)                                    # 2.4
            l = alpha * l + p.sum(axis=1)
            o = (alpha[:, None] * o if rescale_output else o) + p @ v[cols]
            m = m_new
        with np.errstate(divide="ignore", invalid="ignore"):            # step 3
            out[rows] = np.where(l[:, None] > 0, o / np.where(l > 0, l, 1)[:, None], 0.0)
            lse[rows] = np.where(l > 0, m + np.log(np.where(l > 0, l, 1)), -np.inf)
    return out, lse


CASES = [(200, 300, False), (200, 300, True), (300, 100, True), (1, 257, True), (64, 64, True)]


@pytest.mark.parametrize("n_q, n_k, causal", CASES)
def test_the_box_run_as_written_is_attention(n_q, n_k, causal):
    tiles = attention_tiles.kernel_tiles()
    rng = np.random.default_rng(n_q * 7 + n_k)
    q, k, v = (rng.standard_normal((n, 64)) * 2 for n in (n_q, n_k, n_k))
    out, lse = run_box(q, k, v, causal, tiles["BLOCK_Q"], tiles["BLOCK_K"])
    want_out, want_lse = ab.reference(q[None, None], k[None, None], v[None, None], causal=causal)
    np.testing.assert_allclose(out, want_out[0, 0], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(want_lse[0, 0]))   # rows that saw no key
    finite = np.isfinite(lse)
    np.testing.assert_allclose(lse[finite], want_lse[0, 0][finite], rtol=1e-12)
    if causal and n_q > n_k:
        assert np.isneginf(lse).any() and not out[np.isneginf(lse)].any()


def test_the_box_without_the_output_rescale_is_not_attention():
    tiles = attention_tiles.kernel_tiles()
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((n, 64)) * 2 for n in (64, 300, 300))
    out, _ = run_box(q, k, v, False, tiles["BLOCK_Q"], tiles["BLOCK_K"], rescale_output=False)
    want, _ = ab.reference(q[None, None], k[None, None], v[None, None])
    assert not np.allclose(out, want[0, 0], rtol=1e-6, atol=1e-6)
