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


MAX_WORDS = 3000   # one idea per page: about a textbook section


def prose_words(text: str) -> int:
    import re

    return len(re.findall(r"[\w$`\\{}]+", reading_time.prose(text)))


def toc_pages() -> list[Path]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [ROOT / "intro.md"]
    for entry in toc["chapters"]:
        files += [ROOT / f"{entry['file']}.md"] + [ROOT / f"{s['file']}.md" for s in entry.get("sections", [])]
    return files


def test_no_page_is_longer_than_a_section():
    pages = toc_pages()
    assert len(pages) >= 35
    long = {p.name: prose_words(p.read_text()) for p in pages if prose_words(p.read_text()) > MAX_WORDS}
    assert not long, f"pages over {MAX_WORDS} words of prose (split them into sections): {long}"


def test_the_word_count_skips_code_and_can_fail():
    page = "# T\n\n" + "word " * (MAX_WORDS + 1) + "\n```{code-cell} ipython3\n" + "x = 1\n" * 5000 + "```\n"
    assert prose_words(page) > MAX_WORDS
    assert prose_words("# T\n\n```python\n" + "word " * 5000 + "\n```\n") < 5
