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


def test_every_excerpt_pattern_is_in_its_file():
    """Each literalinclude's :start-at: / :start-after: / :end-before: / :end-at: names text its file
    holds (a pattern left behind by an edit of the file fails the strict book build much later)."""
    block = re.compile(r"```\{literalinclude\}\s+(\S+)\n((?::[\w-]+:.*\n)*)")
    missing = []
    for chapter in sorted((REPO_ROOT / "chapters").glob("*.md")):
        for included, options in block.findall(chapter.read_text()):
            source = (chapter.parent / included).resolve().read_text()
            for name, value in re.findall(r":(start-at|start-after|end-before|end-at):\s*(.*)", options):
                pattern = value.strip().strip('"')
                if pattern not in source:
                    missing.append(f"{chapter.name}: {name} {pattern!r} not in {included}")
    assert not missing, "\n".join(missing)
