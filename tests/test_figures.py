"""The book's figure rule (onlinesoftmax/book/readings/figures.py): one colour per kernel, legends that name
what is plotted on their own axes. The strict book build applies it to every figure of every
chapter (the check runs after each cell); these tests show that it can fail."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import onlinesoftmax as osm  # noqa: E402
from onlinesoftmax.book.readings import figures  # noqa: E402


def test_every_registered_kernel_has_its_own_colour():
    kernels = [name for name in osm.REGISTRY if name.startswith("softmax_")]
    assert all(name in figures.PALETTE for name in osm.REGISTRY)
    colours = [figures.PALETTE[name] for name in kernels]
    assert len(set(colours)) == len(colours), "two softmax kernels share a colour"
    assert figures.color("07_warp_per_row") == figures.color("softmax_07_warp_per_row") == figures.color("warp_per_row")
    assert figures.color("torch.softmax") == figures.color("torch")
    with pytest.raises(KeyError, match="known"):
        figures.color("softmax_99_imaginary")


def _figure(legend_from_other_panel=False, wrong_colour=False, title="softmax, recorded"):
    fig, (left, right) = plt.subplots(1, 2)
    for ax, names in ((left, ("softmax_02_online", "softmax_07_warp_per_row", "torch")),
                      (right, ("softmax_07_warp_per_row", "torch"))):
        for i, name in enumerate(names):
            colour = "C5" if wrong_colour and name == "torch" else figures.color(name)
            ax.plot([1, 2], [i, i + 1], color=colour, label=name)
        ax.set_title(title)
    left.legend()
    if legend_from_other_panel:   # the bug chapter 06 had: one panel's handles, the other's labels
        right.legend(left.get_lines(), ["softmax_02_online", "softmax_07_warp_per_row", "torch"])
    else:
        right.legend()
    return fig


def test_a_good_figure_passes():
    assert figures.check_legends(_figure()) == []
    plt.close("all")


@pytest.mark.parametrize("fault, message", [
    ({"legend_from_other_panel": True}, "names no series plotted there"),
    ({"wrong_colour": True}, "the book's colour for torch"),
    ({"title": "recorded: recorded"}, "'recorded' twice"),
])
def test_each_fault_is_found(fault, message):
    problems = figures.check_legends(_figure(**fault))
    plt.close("all")
    assert any(message in p for p in problems), problems


def test_inside_ipython_a_bad_figure_fails_its_cell():
    """The check runs after each cell, before the inline backend would show the figure: the strict
    book build (execution errors are errors) stops on the chapter that drew it."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        assert figures.install_in_ipython()
        shell.user_ns["make"] = _figure
        assert shell.run_cell("fig = make()").success
        shown = shell.run_cell("1 + 2")
        assert shown.success and shown.result == 3, "the last expression is still the cell's value"
        bad = shell.run_cell("fig = make(legend_from_other_panel=True)")
        assert isinstance(bad.error_in_exec, figures.FigureRuleError)
    finally:
        plt.close("all")
        shell.ast_transformers[:] = [t for t in shell.ast_transformers if not isinstance(t, figures._CheckAfterCell)]
        InteractiveShell.clear_instance()
