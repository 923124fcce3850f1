"""CPU tier: registry <-> files <-> headers <-> chapters, the STYLE.md conventions as checks."""
import re
from pathlib import Path

import pytest

import onlinesoftmax as osm
from onlinesoftmax.runtime.loader import KERNELS_DIR, REPO_ROOT, expand_source

VARIANTS = osm.variants()
HEADER_FIELDS = ("Launch:", "Traffic:", "Limits:")


def kernel_files():
    return sorted(p for p in KERNELS_DIR.rglob("*.cu") if "wrong" not in p.parts)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_variant_names_its_file_and_entry(variant):
    stem = Path(variant.file).stem
    assert variant.name.startswith(stem), "a variant's name starts with its file stem"
    assert variant.entry_name.startswith(stem), "an entry is named after its file"
    # A plain entry is declared in the file; a macro-built one (the fast kernels) is checked against
    # ptxas's report of every build in tests/test_kernels_compile.py.
    declared = set(re.findall(r'extern "C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?([\w#]+)\s*\(',
                              variant.path.read_text().replace("\\\n", " ")))  # macro lines joined
    assert variant.entry_name in variant.launched_entries
    if not any("##" in name for name in declared):
        missing = set(variant.launched_entries) - declared
        assert not missing, f"{variant.file} declares no entries {sorted(missing)}"
    assert variant.family and variant.story and variant.dtypes


@pytest.mark.parametrize("path", kernel_files(), ids=lambda p: p.name)
def test_every_kernel_file_is_registered_and_has_a_header_block(path):
    rel = str(path.relative_to(KERNELS_DIR))
    assert any(v.file == rel for v in VARIANTS), f"{rel} has no registry entry"
    head = path.read_text().split("#include")[0].split("extern")[0]
    assert head.startswith("//") and path.stem in head.splitlines()[0], "header block names the kernel"
    for field in HEADER_FIELDS:
        assert field in head, f"{rel}: header block lacks {field!r}"


@pytest.mark.parametrize("path", kernel_files(), ids=lambda p: p.name)
def test_numbered_in_story_order(path):
    assert re.fullmatch(r"[a-z_]+_\d{2}_[a-z0-9_]+", path.stem), f"{path.name}: <family>_NN_<idea>.cu"


def test_shared_helpers_are_included_not_pasted():
    for path in kernel_files():
        source = path.read_text()
        for helper in ("struct OnlineState", "__device__ __forceinline__ float neg_inf"):
            assert helper not in source, f"{path.name} pastes a helper from kernels/common"
        _, files = expand_source(path)
        assert files[0].endswith(path.name)


def test_every_chapter_in_the_toc_exists_and_every_chapter_is_in_the_toc():
    toc = (REPO_ROOT / "_toc.yml").read_text()
    listed = set(re.findall(r"file:\s*(\S+)", toc))
    for name in listed:
        assert (REPO_ROOT / f"{name}.md").is_file(), f"_toc.yml lists a missing page {name}"
    pages = {f"chapters/{p.stem}" for p in (REPO_ROOT / "chapters").glob("[0-9a-z]*.md")}
    assert pages <= listed, f"chapters not in the toc: {sorted(pages - listed)}"


def test_chapters_show_kernels_from_files_not_pasted_copies():
    for chapter in (REPO_ROOT / "chapters").glob("*.md"):
        text = chapter.read_text()
        assert 'extern "C" __global__' not in text, f"{chapter.name} pastes kernel code; use literalinclude"
        for included in re.findall(r"literalinclude::?\}?\s*(\S+)", text):
            assert (chapter.parent / included).resolve().is_file(), f"{chapter.name}: {included} missing"


def excerpt_problems(chapter_name: str, text: str, read) -> list[str]:
    """What is wrong with the literalincludes of a chapter's text: a :start-at: / :start-after: /
    :end-before: / :end-at: pattern its file does not hold, or an end that comes only before the start
    (Sphinx searches for the end after the start: 'end-before pattern not found' in the strict build)."""
    block = re.compile(r"```\{literalinclude\}\s+(\S+)\n((?::[\w-]+:.*\n)*)")
    found = []
    for included, options in block.findall(text):
        source = read(included)
        patterns = dict((name, value.strip().strip('"')) for name, value in
                        re.findall(r":(start-at|start-after|end-before|end-at):\s*(.*)", options))
        for name, pattern in patterns.items():
            if pattern not in source:
                found.append(f"{chapter_name}: {name} {pattern!r} not in {included}")
        start = next((patterns[n] for n in ("start-at", "start-after") if n in patterns), None)
        end = next((patterns[n] for n in ("end-before", "end-at") if n in patterns), None)
        if start and end and start in source and end in source and end not in source[source.index(start):]:
            found.append(f"{chapter_name}: {end!r} comes only before {start!r} in {included}")
    return found


def test_every_excerpt_pattern_is_in_its_file():
    """Each literalinclude's patterns are in its file, the end after the start (a pattern left behind
    by an edit of the file fails the strict book build much later)."""
    missing = []
    for chapter in sorted((REPO_ROOT / "chapters").glob("*.md")):
        missing += excerpt_problems(chapter.name, chapter.read_text(),
                                    lambda included, chapter=chapter: (chapter.parent / included).resolve().read_text())
    assert not missing, "\n".join(missing)


def test_the_excerpt_check_can_fail():
    source = "a();\nb();\nc();\n"
    page = lambda start, end: f"```{{literalinclude}} f.cu\n:start-at: \"{start}\"\n:end-before: \"{end}\"\n```\n"  # noqa: E731
    read = lambda included: source  # noqa: E731
    assert excerpt_problems("p", page("a();", "c();"), read) == []
    assert excerpt_problems("p", page("c();", "a();"), read)   # the end only before the start
    assert excerpt_problems("p", page("a();", "d();"), read)   # a pattern the file does not hold
