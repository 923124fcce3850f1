"""The estimated reading time under each page's title, counted from the page's prose at build time.

A page's prose is its text without front matter, code cells and fences, display math and directive
options; at READING_WPM words a minute it takes `minutes(text)` to read, rounded up. The line is
added to the source as Sphinx reads it (`source-read`), right after the first `# ` title, so the
files never hold a number that could drift from the text.
"""
from __future__ import annotations

import math
import re

READING_WPM = 200            # words a minute for technical prose with formulas


def prose_lines(text: str):
    """(line number, text) of the prose: no front matter, code fences, $$ blocks, directive options
    or HTML comments. tests/test_prose_numbers.py reads pages with it too."""
    lines = text.splitlines()
    start = 0
    if lines and lines[0].strip() == "---":
        start = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), -1) + 1
    in_code = in_math = False
    for number, line in enumerate(lines[start:], start + 1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code:
            continue
        if stripped.startswith("$$") or stripped.endswith("$$"):
            if stripped.count("$$") == 1:
                in_math = not in_math
            continue
        if in_math or re.match(r"^:[\w-]+:", stripped) or stripped.startswith("<!--"):
            continue
        yield number, line


def prose(text: str) -> str:
    return "\n".join(line for _, line in prose_lines(text))


def minutes(text: str) -> int:
    return max(1, math.ceil(len(re.findall(r"[\w$`\\{}]+", prose(text))) / READING_WPM))


def with_reading_time(text: str) -> str:
    """text with "*About N minutes to read.*" after its first `# ` title (unchanged without one)."""
    title = re.search(r"^# .*$", text, re.M)
    if title is None:
        return text
    n = minutes(text)
    line = f"\n\n*About {n} minute{'s' if n != 1 else ''} to read.*\n"
    return text[:title.end()] + line + text[title.end():]


def _source_read(app, docname: str, source: list) -> None:
    if docname.startswith("chapters/") and not docname.endswith("glossary"):
        source[0] = with_reading_time(source[0])


def setup(app) -> dict:
    app.connect("source-read", _source_read)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
