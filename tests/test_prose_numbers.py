"""Numbers in the book's prose come from executed cells (glue) or from data, never typed.

The rule this test enforces on every page listed in _toc.yml: outside code, math, inline code and
glue roles, a sentence may not hold a measured-looking number — a decimal fraction (0.74, 33.9),
a number with a unit of time, rate or frequency (µs, GB/s, GHz), a percentage, a speed-up
("36 times", "1.5x"), a count of SMs, an L2 size, or an approximate value ("about 10M"). Integers that define a shape or a parameter
(N = 1024, 16-byte loads, a batch of 4000, 32 lanes) are not measurements and stay typed.
ALLOWED lists the few typed exceptions, each a definition or a source's own figure that the
page labels as such.
"""
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
from reading_time import prose_lines  # noqa: E402  (the book's one reading of a page's prose)
ALLOWED = (
    r"0x[0-9A-Fa-f]+",                       # bit patterns
    r"\bsm_\d+a?\b", r"\bcompute capability \d\.\d\b", r"\bcc \d\.\d\b",
    r"\bPython 3\.\d+\b", r"\bCUDA 1\d(\.\d)?\b", r"\bJupyter Book 1\.x\b", r"\bformat_version: [\d.]+",
    r"\bjupytext_version: [\d.]+", r"\bIEEE 754\b", r"\b1\.0\b(?= of (the )?copy)",
    r"arXiv:\d+\.\d+", r"\bsections? \d+(\.\d+)*( and \d+(\.\d+)*)?", r"\bequation \(\d+\)",
    r"\d+ [×x] (\d+|\{glue)",                # a shape, rows x columns
)
# A source's own figures, quoted and labelled as the source's on that line: (page stem, text).
SOURCE_FIGURES = (
    ("00_gpu_primer", "NVIDIA's H200 datasheet gives 141 GB of HBM3e at 4.8 TB/s peak (NVIDIA's figures"),
    ("03_bytes_and_speed", "(the paper's figures, not ours)"),
    ("03_bytes_and_speed", "which this chapter labels as the paper's claim"),
    ("02_online_normalizer", "The paper's own V100 measurements show the online kernel up to about 1.3×"),
)
MEASURED = re.compile(
    r"(?<![\w.])(\d+\.\d+)(?![\w.])"                                    # a decimal fraction
    r"|(?<![\w.])\d[\d,.]*\s?(µs|us|ms|ns|GB/s|TB/s|GHz|MHz|%)(?!\w)"   # time, rate, frequency, percent
    r"|(?<![\w.])\d[\d,.]*\s?(times|×)(?!\w)"                           # a speed-up
    r"|(?<![\w.])\d+ SMs\b|\b\d+ (MB|MiB) (of )?L2\b|\bL2 of \d+"       # SM counts, L2 size
    r"|\b(?:about|roughly|nearly|approximately|around)\s+~?\d[\d,.]*\w*"    # an approximate value
)


def pages() -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [entry["file"] for entry in toc.get("chapters", [])] + \
        [section["file"] for entry in toc.get("chapters", []) for section in entry.get("sections", [])]
    return [ROOT / f"{name}.md" for name in files]


def typed_measurements(text: str, page: str = "") -> list[tuple[int, str, str]]:
    found = []
    for number, line in prose_lines(text):
        if any(stem == page and quoted in line for stem, quoted in SOURCE_FIGURES):
            continue
        cleaned = line
        for pattern in ALLOWED:
            cleaned = re.sub(pattern, " ", cleaned)
        cleaned = re.sub(r"\{glue:?\w*\}`[^`]*`", " ", cleaned)
        cleaned = re.sub(r"\$[^$]*\$|`[^`]*`|\]\([^)]*\)|https?://\S+", " ", cleaned)
        for match in MEASURED.finditer(cleaned):
            found.append((number, match.group(0).strip(), line.strip()[:120]))
    return found


def test_the_rule_catches_typed_measurements():
    bad = ("The kernel reaches 0.74 of the copy.\nIt takes 11.4 µs, 36 times faster, at 3350 GB/s.\n"
           "Ten rows leave 122 of 132 SMs idle; the 60 MB L2 holds it.\nRows of about 10M elements.\n")
    assert [value for _, value, _ in typed_measurements(bad)] == [
        "0.74", "11.4", "36 times", "3350 GB/s", "132 SMs", "60 MB L2", "about 10M"]
    good = ("At N = 1024 a row is 4 KB; a batch of 4000 rows, 16-byte loads, 32 lanes.\n"
            "It reaches {glue:text}`frac:.2f` of the copy, $e^{0.5}$, `y = 0.5 * x`.\n"
            "```python\nratio = 0.74\n```\n$$\nl = 1.5\n$$\n")
    assert typed_measurements(good) == []


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.stem)
def test_no_typed_measurement_in_the_prose(page):
    found = typed_measurements(page.read_text(), page.stem)
    assert not found, f"{page.name}: numbers typed into prose (glue them from a cell or data/):\n" + \
        "\n".join(f"  line {n}: {value!r} in: {text}" for n, value, text in found)
