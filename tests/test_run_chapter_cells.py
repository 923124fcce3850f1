"""scripts/run_chapter_cells.py: a chapter script run cell by cell, markdown skipped, stopped at the
first failing cell with exit status 1, the slow cells named."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("run_chapter_cells", ROOT / "scripts" / "run_chapter_cells.py")
runner = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(runner)

SCRIPT = """# ---
# jupyter: header
# ---

# %% [markdown]
# # A title
# x = 99

# %%
x = 1

# %% tags=["remove-cell"]
import time
time.sleep(0.3)

# %%
assert x == 1, "markdown ran as code"
print("after", x)
"""


def test_cells_are_the_code_cells_only():
    found = runner.cells(SCRIPT)
    assert [src.strip().splitlines()[0] for _, src in found] == ["x = 1", "import time", "assert x == 1, \"markdown ran as code\""]
    assert runner.first_code_line("# a comment\n\ny = 2\n") == "y = 2"


def run(tmp_path, text, *extra):
    pytest.importorskip("IPython")
    path = tmp_path / "page.py"
    path.write_text(text)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "run_chapter_cells.py"), str(path), *extra],
                          capture_output=True, text=True, timeout=120)


def test_a_page_runs_and_its_slow_cell_is_named(tmp_path):
    done = run(tmp_path, SCRIPT, "--slow", "0.2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "after 1" in done.stdout and "3 cells in" in done.stdout
    assert "line 13: import time" in done.stdout                    # the sleeping cell, by its first line


def test_a_failing_cell_stops_the_page_with_status_1(tmp_path):
    """The wrong answer a runner could give: exit 0 after printing the traceback, or running on."""
    done = run(tmp_path, SCRIPT.replace("x = 1\n", "x = 2\n"))
    assert done.returncode == 1
    assert "markdown ran as code" in done.stdout + done.stderr and "after 2" not in done.stdout
