"""A table a page builds is shown: `book.html_table` returns an IPython HTML object, which a notebook
displays only as the last expression of a cell. Anywhere else (mid-cell, inside a loop, an if or a
function) the table is built and dropped, and the reader never sees it: it must go through display()."""
import ast
import pathlib

import jupytext
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHOWN_ONLY_LAST = ("html_table",)


def dropped_tables(source: str) -> list[int]:
    """Lines of the bare html_table(...) expressions of a cell that are not its last statement."""
    code = "\n".join("pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    tree = ast.parse(code)
    last = tree.body[-1] if tree.body else None
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node is not last:
            func = node.value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in SHOWN_ONLY_LAST:
                found.append(node.lineno)
    return found


@pytest.mark.parametrize("page", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "chapters").glob("*.md")))
def test_every_table_a_page_builds_is_shown(page):
    cells = [c.source for c in jupytext.read(ROOT / page).cells if c.cell_type == "code"]
    dropped = {i: lines for i, source in enumerate(cells) if (lines := dropped_tables(source))}
    assert dropped == {}, f"{page}: code cells (index: lines) whose tables are never shown: {dropped}"


@pytest.mark.parametrize("source, dropped", [
    ("t = 1\nbook.html_table(['a'], [[1]])\nx = 2\n", [2]),                 # mid-cell: dropped
    ("for r in rows:\n    book.html_table(['a'], [[r]])\n", [2]),           # in a loop: dropped
    ("if ok:\n    book.html_table(['a'], [[1]])\nelse:\n    pass\n", [2]),  # in a branch: dropped
    ("x = 1\nbook.html_table(['a'], [[1]])\n", []),                       # the last expression: shown
    ("display(book.html_table(['a'], [[1]]))\nx = 2\n", []),              # displayed
    ("table = book.html_table(['a'], [[1]])\n", []),                      # kept for later
])
def test_the_check_finds_dropped_tables(source, dropped):
    assert dropped_tables(source) == dropped
