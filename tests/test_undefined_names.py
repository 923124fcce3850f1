"""Every name a Python file or a chapter's code reads is defined somewhere it can be read from.

The GPU tier and the chapters' GPU branches never run on the CPU, so a name used there but never
defined (a constant renamed, an import forgotten) would first fail on the GPU machine, as a whole
module's tests at once. This check reads each file's symbol tables (Python's `symtable`, no
execution): a name read at module level, or read as a global inside a function or class, must be
assigned or imported at module level, assigned by a walrus in a comprehension, or be a builtin.
"""
import builtins
import pathlib
import re
import subprocess
import symtable

import jupytext
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODULE_NAMES = {"__file__", "__name__", "__doc__", "__spec__", "__path__", "__builtins__", "__loader__",
                "__package__", "__annotations__", "__dict__", "__class__"}
COMPREHENSIONS = {"listcomp", "setcomp", "dictcomp", "genexpr"}


def scopes(table):
    yield table
    for child in table.get_children():
        yield from scopes(child)


def undefined_names(text, filename="<text>"):
    """[(scope, line, name)] for every name `text` reads that nothing in it defines."""
    if re.search(r"^\s*from\s+\S+\s+import\s+\*", text, re.MULTILINE):   # `import *`: nothing can be said
        return []
    top = symtable.symtable(text, filename, "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    for table in scopes(top):   # a walrus inside a comprehension binds in the enclosing scope
        if table.get_name() in COMPREHENSIONS:
            defined |= {s.get_name() for s in table.get_symbols() if s.is_assigned()}
    known = defined | set(dir(builtins)) | MODULE_NAMES
    return [(table.get_name(), table.get_lineno(), s.get_name())
            for table in scopes(top) for s in table.get_symbols()
            if s.is_referenced() and (table is top or s.is_global()) and s.get_name() not in known]


def python_files():
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in listed.stdout.split() if (ROOT / p).exists()]


def chapter_pages():
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "chapters").glob("*.md")) + ["intro.md"]


@pytest.mark.parametrize("path", python_files())
def test_python_file_reads_only_defined_names(path):
    assert undefined_names((ROOT / path).read_text(), path) == []


@pytest.mark.parametrize("page", chapter_pages())
def test_chapter_code_reads_only_defined_names(page):
    # the page's code cells as one script (magics commented out), GPU branches included
    script = jupytext.writes(jupytext.read(ROOT / page), fmt="py:percent")
    assert undefined_names(script, page) == []


# wrong answers the check must reject, and right ones it must accept
@pytest.mark.parametrize("text, name", [
    ("A = 1\ndef test():\n    return (A, B)\n", "B"),                  # the GPU tier's renamed constant
    ("print(undefined_at_top)\n", "undefined_at_top"),
    ("class C:\n    x = missing\n", "missing"),
    ("def f():\n    return [y for y in rows]\n", "rows"),
    ("def f():\n    import os\nos.getcwd()\n", "os"),                 # imported in a function only
])
def test_a_name_nothing_defines_is_found(text, name):
    assert name in {found for _, _, found in undefined_names(text)}


@pytest.mark.parametrize("text", [
    "import os\ndef f():\n    return os.sep, len, __file__\n",
    "def f():\n    x = 1\n    def g():\n        return x\n    return g\n",
    "[(c := n) for n in range(3)]\nprint(c)\n",
    "from os.path import *\nprint(join)\n",
    "def f():\n    global G\n    G = 1\nG = 0\nprint(G)\n",
])
def test_defined_names_pass(text):
    assert undefined_names(text) == []
