"""Run chapters cell by cell (on CPU: the NumPy models and recorded data) and list every figure that
breaks the book's figure rule (onlinesoftmax/book/readings/figures.py), without stopping at the first.

    .venv/bin/python scripts/check_figures.py chapters/02_online_normalizer.md [more chapters]

Exit status 1 when a figure breaks the rule or a cell fails. The strict book build applies the same
rule and stops at a chapter's first bad figure; this lists them all while the figures are fixed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")


def main(paths: list[str]) -> int:
    import jupytext
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from onlinesoftmax.book.readings import figures

    status = 0
    for path in [Path(p).resolve() for p in paths]:
        notebook = jupytext.read(path)
        shell = InteractiveShell.instance()
        os.chdir(root / "chapters")
        problems = []
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            result = shell.run_cell(cell.source, silent=True)
            if not result.success and not isinstance(result.error_in_exec, figures.FigureRuleError):
                problems.append(f"cell {index}: {type(result.error_in_exec or result.error_before_exec).__name__}")
            for number in plt.get_fignums():
                problems += [f"cell {index}: {p}" for p in figures.check_legends(plt.figure(number))]
            plt.close("all")
        InteractiveShell.clear_instance()
        print(f"{path.relative_to(root)}: {'ok' if not problems else str(len(problems)) + ' problem(s)'}")
        for problem in problems:
            print("  " + problem)
        status |= bool(problems)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
