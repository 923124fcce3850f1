"""Run one chapter script (jupytext py:percent, from scripts/chapters_to_scripts.sh) cell by cell in one
IPython shell, as the book build runs a notebook, and report the cells that took longest.

    python3 scripts/run_chapter_cells.py build/chapter_scripts/03_online_kernel.py [--slow SECONDS]

Run from chapters/ (the pages' working directory). The exit status is 1 when a cell raises (the
traceback is printed and the later cells are skipped, as in a strict build), else 0. The last lines
name every cell that ran longer than --slow seconds (2 by default) with its first line of code, so
a page over its time budget shows where the time went.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

CELL = re.compile(r"^# %%(?P<header>.*)$")


def cells(text: str) -> list[tuple[int, str]]:
    """(first line number, source) of each code cell; markdown cells are skipped."""
    found, lines, start, markdown = [], [], 1, True
    for number, line in enumerate(text.splitlines(), 1):
        marker = CELL.match(line)
        if marker:
            if lines and not markdown:
                found.append((start, "\n".join(lines)))
            lines, start, markdown = [], number + 1, "[markdown]" in marker["header"]
        else:
            lines.append(line)
    if lines and not markdown:
        found.append((start, "\n".join(lines)))
    return [(n, src) for n, src in found if src.strip()]


def first_code_line(source: str) -> str:
    return next((line.strip() for line in source.splitlines() if line.strip() and not line.startswith("#")), "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path)
    parser.add_argument("--slow", type=float, default=2.0, help="report cells slower than this (seconds)")
    args = parser.parse_args(argv)
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="nocolor")
    timings, status, began = [], 0, time.perf_counter()
    for line, source in cells(args.script.read_text()):
        started = time.perf_counter()
        result = shell.run_cell(source, silent=False)
        timings.append((time.perf_counter() - started, line, first_code_line(source)))
        if not result.success:
            status = 1
            break
    total = time.perf_counter() - began
    slow = sorted((t for t in timings if t[0] >= args.slow), reverse=True)
    print(f"# {args.script.name}: {len(timings)} cells in {total:.1f} s"
          + (f"; slower than {args.slow:g} s:" if slow else ""))
    for seconds, line, code in slow:
        print(f"#   {seconds:6.1f} s  line {line}: {code[:90]}")
    return status


if __name__ == "__main__":
    sys.exit(main())
