"""The reading time under each page's title (_ext/reading_time.py) is counted from the prose: code
cells and display math do not count, and the line goes right after the title."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import reading_time  # noqa: E402


def test_only_prose_counts_and_the_line_follows_the_title():
    words = " ".join(["word"] * 450)
    page = (f"---\nkernelspec: x\n---\n\n(label)=\n# A title\n\n{words}\n\n```{{code-cell}} ipython3\n"
            + "x = 1\n" * 500 + "```\n\n$$\n" + "a + b \\\\\n" * 300 + "$$\n")
    assert reading_time.minutes(page) == 3     # 450 words of prose (and the title's two) at 200 a minute
    marked = reading_time.with_reading_time(page)
    assert "# A title\n\n*About 3 minutes to read.*\n" in marked
    assert reading_time.with_reading_time("no title here") == "no title here"


def test_every_chapter_gets_a_time():
    for path in sorted((ROOT / "chapters").glob("[0-9]*.md")):
        marked = reading_time.with_reading_time(path.read_text())
        assert "minutes to read.*" in marked or "minute to read.*" in marked, path.name
