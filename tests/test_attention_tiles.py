"""The tile figure of chapter 08 is drawn from the kernel's own constants: BLOCK_Q and BLOCK_K read
from attention_01_blocked.cu equal the launcher's, and the tiles drawn as loaded are the ones the
kernel's loop visits (its NumPy model's loop bound). A changed #define fails here."""
import math

import matplotlib
import numpy as np
import pytest

from onlinesoftmax.book.readings import attention_tiles as at
from onlinesoftmax.kernels.attention import blocked as ab

matplotlib.use("Agg")


def test_the_tiles_are_the_kernels():
    assert at.kernel_tiles() == {"BLOCK_Q": ab.BLOCK_Q, "BLOCK_K": ab.BLOCK_K}


def test_a_changed_define_is_seen(tmp_path):
    source = tmp_path / "attention_01_blocked.cu"
    source.write_text(at.SOURCE.read_text().replace("#define BLOCK_K 64", "#define BLOCK_K 32"))
    assert at.kernel_tiles(source)["BLOCK_K"] == 32 != ab.BLOCK_K


@pytest.mark.parametrize("n_q, n_k", [(256, 384), (200, 200), (64, 1000), (300, 100)])
def test_the_drawn_tiles_are_the_loops(n_q, n_k):
    """Every key tile drawn as loaded holds a key some row of its query tile sees, and every key some
    row sees lies in a loaded tile (bottom-right causal): the kernel's loop bound, tile by tile."""
    import matplotlib.pyplot as plt

    fig, drawn = at.tile_figure(n_q=n_q, n_k=n_k, causal=True, owner=0)
    plt.close(fig)
    rows = np.arange(n_q)
    sees = np.arange(n_k)[None, :] <= rows[:, None] + n_k - n_q
    for i, count in enumerate(drawn["visited"]):
        band = sees[i * ab.BLOCK_Q:(i + 1) * ab.BLOCK_Q]
        needed = math.ceil((np.flatnonzero(band.any(axis=0)).max(initial=-1) + 1) / ab.BLOCK_K)
        assert count == needed, (i, count, needed)
    assert at.visited_tiles(n_q, n_k, False, ab.BLOCK_Q, ab.BLOCK_K) == [math.ceil(n_k / ab.BLOCK_K)] * len(drawn["visited"])


@pytest.mark.parametrize("causal", [True, False])
def test_the_figure_keeps_the_books_figure_rule(causal):
    """Each legend entry names a patch drawn there (the book build checks every figure with
    check_legends); legend handles made apart from the tiles are the wrong answer it rejects."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from onlinesoftmax.book.readings import figures

    plt.close("all")
    fig, _ = at.tile_figure(n_q=256, n_k=384, causal=causal)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert ("never loaded (causal)" in labels) == causal and len(labels) == len(set(labels))
    assert figures.check_legends(fig) == []
    fig.axes[0].legend(handles=[Rectangle((0, 0), 1, 1, label="a swatch of no tile")])
    assert figures.check_legends(fig)
    plt.close("all")


def test_the_tensor_core_figure_is_the_header_and_the_launcher():
    """The tensor-core block figure (chapter 09) reads attention_mma.cuh's geometry, which equals the
    launcher's (onlinesoftmax/kernels/attention/mma.py), and draws one strip per warp with BLOCK_K / 8
    score and d / 8 output accumulators in a warp's strip, as the header's s[8][4] and o[D/8][4] say."""
    import matplotlib.pyplot as plt

    from onlinesoftmax.book.readings import figures
    from onlinesoftmax.kernels.attention import mma as am

    tiles = at.mma_tiles()
    assert tiles == {"MMA_BLOCK_Q": am.BLOCK_Q, "MMA_BLOCK_K": am.BLOCK_K, "MMA_WARPS": am.THREADS // 32,
                     "MMA_WARP_ROWS": am.WARP_ROWS}
    header = at.MMA_HEADER.read_text()
    assert f"s[{am.BLOCK_K // at.MMA_N}][4]" in header and "o[D/8][4]" in header
    for d in (64, 128):
        fig, drawn = at.mma_tile_figure(d=d)
        assert (drawn["strips"], drawn["s_accumulators"], drawn["o_accumulators"]) == \
            (am.BLOCK_Q // am.WARP_ROWS, am.BLOCK_K // 8, d // 8)
        assert figures.check_legends(fig) == []
        plt.close(fig)


def test_a_changed_tensor_core_define_is_seen(tmp_path):
    """The wrong answers: a header whose block or warp count changed reads differently from the
    launcher, and a figure drawn from it has other strips (rows past the warps drawn as such)."""
    import matplotlib.pyplot as plt

    from onlinesoftmax.kernels.attention import mma as am

    header = tmp_path / "attention_mma.cuh"
    header.write_text(at.MMA_HEADER.read_text().replace("#define MMA_WARPS 8", "#define MMA_WARPS 4"))
    tiles = at.mma_tiles(header)
    assert tiles["MMA_WARPS"] == 4 != am.THREADS // 32
    fig, drawn = at.mma_tile_figure(tiles=tiles)
    assert drawn["strips"] == 4 and "rows past the block's warps" in fig.legends[0].get_texts()[-1].get_text()
    plt.close(fig)
