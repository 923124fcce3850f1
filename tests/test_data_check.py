"""CPU tier: the recorded suites the book cites still measure the code (`make check-data`), and the
check fails when a cited kernel's source changes without a new recording."""
import json
import shutil

import pytest

from onlinesoftmax.measure import check_data, freshness, results
from onlinesoftmax.runtime.loader import REPO_ROOT

FILES = sorted(results.DATA_DIR.glob("*/*.json"))
ROWS = [{"kernel": "softmax_02_online", "dtype": "float32", "us": 1.0},
        {"kernel": "torch_softmax", "dtype": "float32", "us": 2.0}]


def test_cited_suites_are_current():
    """What `make check-data` says about this repository: every cited suite measures the code as it is."""
    verdicts = check_data.check()
    assert verdicts, "no cited suite found: the check would pass vacuously"
    text, status = check_data.report(verdicts)
    assert status == 0, "\n" + text


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_file_records_its_sources(path):
    meta = json.loads(path.read_text())["meta"]
    assert "sources" in meta, "no source hashes: record through results.write_results"
    if meta["sources"] is None:
        assert meta.get("sources_note"), "unverifiable without saying why"
    else:
        assert meta["sources"], "a suite of the project's kernels with no sources"
        assert all(p.startswith(("kernels/", "onlinesoftmax/", "exercises/primer/")) for p in meta["sources"])


def test_sources_follow_includes_and_launch_modules():
    paths = set(freshness.source_hashes(ROWS))
    assert "kernels/softmax/softmax_02_online.cu" in paths
    assert "onlinesoftmax/kernels/softmax/teaching.py" in paths
    assert any(p.startswith("kernels/common/") for p in paths), paths     # its includes, transitively


def test_write_results_records_sources(tmp_path):
    meta = {"gpu": "Test GPU", "date": "2026-01-01", "git_commit": "x"}
    path = results.write_results("tiny-suite", ROWS, meta, folder=tmp_path)
    written = json.loads(path.read_text())
    assert written["meta"]["sources"] == freshness.source_hashes(ROWS)
    assert written["rows"] == ROWS


def test_a_row_may_name_the_package_modules_it_measured(tmp_path):
    """A composite call (linear_cross_entropy: torch's products around cross_entropy_01_rows) names
    its module in "modules": the suite goes stale when that module changes, as when its kernel does."""
    root = _fixture_repo(tmp_path)
    module = "onlinesoftmax/linear_loss.py"
    (root / module).write_text("def loss():\n    return 1\n")
    rows = [{"kernel": "cross_entropy_01_rows (linear sum)", "variant": "cross_entropy_01_rows",
             "modules": [module, "onlinesoftmax/not_there.py"], "ms": 1.0}]
    assert {module, "kernels/cross_entropy/cross_entropy_01_rows.cu"} <= set(
        freshness.source_hashes(rows, freshness.reader_at(root)))
    _record(root, "tiny-suite", rows=rows)
    assert _run(root)[1][1] == 0
    (root / module).write_text("def loss():\n    return 2\n")
    verdicts, (text, status) = _run(root)
    assert status == 1 and module in verdicts[0].changed, text


# --- a small copy of the repository: one chapter citing one suite --------------------------------------

def _fixture_repo(tmp_path, cite=("tiny-suite",), chapter_extra=""):
    root = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "kernels", root / "kernels", ignore=shutil.ignore_patterns("emulator"))
    shutil.copytree(REPO_ROOT / "onlinesoftmax" / "kernels", root / "onlinesoftmax" / "kernels",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "onlinesoftmax" / "book").mkdir()
    (root / "chapters").mkdir()
    loads = "\n".join(f'data = results.load_recorded("{suite}")' for suite in cite)
    (root / "chapters" / "01_x.md").write_text(f"# A chapter\n\n```python\n{loads}\n```\n{chapter_extra}")
    (root / "data" / "h200").mkdir(parents=True)
    return root


def _record(root, suite, date="2026-01-01", rows=ROWS):
    sources = freshness.source_hashes(rows, freshness.reader_at(root))
    meta = {"gpu": "NVIDIA H200", "date": date, "git_commit": "x", "sources": sources}
    path = root / "data" / "h200" / f"{date}-{suite}.json"
    path.write_text(json.dumps({"meta": {**meta, "suite": suite}, "rows": rows}, indent=1) + "\n")
    return path


def _run(root):
    verdicts = check_data.check(root)
    return verdicts, check_data.report(verdicts)


def test_check_passes_then_fails_when_a_cited_header_changes(tmp_path):
    root = _fixture_repo(tmp_path)
    _record(root, "tiny-suite")
    verdicts, (text, status) = _run(root)
    assert status == 0 and [v.status for v in verdicts] == ["current"], text
    assert "all 1 cited suites are current" in text

    header = sorted(p for p in freshness.source_hashes(ROWS, freshness.reader_at(root))
                    if p.startswith("kernels/common/"))[0]
    with open(root / header, "a") as f:
        f.write("\n// a comment changes nothing that runs\n")
    assert _run(root)[1][1] == 0
    with open(root / header, "a") as f:
        f.write("\n#define CHECK_DATA_EDIT 1\n")
    verdicts, (text, status) = _run(root)
    assert status == 1 and verdicts[0].status == "stale"
    assert verdicts[0].changed == [header] and header in text


def test_check_fails_when_the_kernel_or_its_launch_module_changes(tmp_path):
    root = _fixture_repo(tmp_path)
    _record(root, "tiny-suite")
    for path, edit in (("kernels/softmax/softmax_02_online.cu", "#define CHECK_DATA_EDIT 1"),
                       ("onlinesoftmax/kernels/softmax/teaching.py", "CHECK_DATA_EDIT = 1")):
        with open(root / path, "a") as f:
            f.write(f"\n{edit}\n")
        verdicts, (text, status) = _run(root)
        assert status == 1 and path in verdicts[0].changed, text


def test_only_cited_suites_and_only_the_newest_file_count(tmp_path):
    root = _fixture_repo(tmp_path)
    old = _record(root, "tiny-suite", date="2026-01-01")
    _record(root, "other-suite")                      # no chapter names it
    with open(root / "kernels/softmax/softmax_02_online.cu", "a") as f:
        f.write("\n#define CHECK_DATA_EDIT 1\n")
    new = _record(root, "tiny-suite", date="2026-01-02")
    verdicts, (text, status) = _run(root)
    assert status == 0, text
    assert [v.file for v in verdicts] == [str(new.relative_to(root))] and old.name not in text


def test_unverifiable_suite_fails(tmp_path):
    root = _fixture_repo(tmp_path)
    path = _record(root, "tiny-suite")
    data = json.loads(path.read_text())
    data["meta"]["sources"], data["meta"]["sources_note"] = None, "commit x is not in this history"
    path.write_text(json.dumps(data))
    verdicts, (text, status) = _run(root)
    assert status == 1 and verdicts[0].status == "unverifiable" and "not in this history" in text


def test_historical_mark_accepts_only_the_marked_suite(tmp_path):
    marks = "\n<!-- historical-suite: tiny-suite -->\n"
    root = _fixture_repo(tmp_path, cite=("tiny-suite", "second-suite"), chapter_extra=marks)
    _record(root, "tiny-suite")
    _record(root, "second-suite")
    with open(root / "kernels/softmax/softmax_02_online.cu", "a") as f:
        f.write("\n#define CHECK_DATA_EDIT 1\n")
    verdicts, (text, status) = _run(root)
    by_suite = {v.suite: v for v in verdicts}
    assert by_suite["tiny-suite"].status == "stale" and not by_suite["tiny-suite"].fails
    assert by_suite["second-suite"].fails                      # stale and not marked: still fails
    assert status == 1 and "cited as historical" in text


def test_topk_suites_count_as_the_book_reads_them(tmp_path):
    root = _fixture_repo(tmp_path, cite=())
    rows = [{"kernel": "softmax_topk_04_online_fused", "case": "moe", "dtype": "float32", "ms": 1.0}]
    _record(root, "softmax-topk-quick", date="2026-01-01", rows=rows)
    _record(root, "softmax-topk-moe", date="2026-01-02", rows=rows)
    _record(root, "softmax-topk-paper", date="2025-12-31", rows=rows)     # older than the quick run: not read
    assert [v.suite for v in check_data.check(root)] == ["softmax-topk-moe", "softmax-topk-quick"]
    _record(root, "softmax-topk", date="2026-01-03", rows=rows)           # a full run replaces them all
    assert [v.suite for v in check_data.check(root)] == ["softmax-topk"]


def test_repository_historical_marks_name_recorded_suites():
    marks = check_data.historical(check_data.citing_texts())
    recorded = {suite for _, suite in check_data.recorded_suites()}
    assert set(marks) <= recorded, set(marks) - recorded


def test_comments_and_docstrings_do_not_count_but_code_does():
    """The digest of a Python launch module ignores comments (whole-line and trailing) and docstrings,
    and sees any change to the code itself, even one token."""
    from onlinesoftmax.measure.freshness import _digest

    base = 'def f(x):\n    """Doc."""\n    return x + 1   # one\n# note\n'
    assert _digest(base, "m.py") == _digest(base.replace("# one", "# two").replace("# note", "# other"), "m.py")
    assert _digest(base, "m.py") == _digest(base.replace('"""Doc."""', '"""Reworded, longer."""'), "m.py")
    assert _digest(base, "m.py") != _digest(base.replace("x + 1", "x + 2"), "m.py")
    assert _digest(base, "m.py") != _digest(base.replace("x + 1   # one", "x + 1   ;y = '# one'"), "m.py")
    cuda = "int f(int x) { return x + 1; } // one\n"
    assert _digest(cuda, "k.cu") == _digest(cuda.replace("// one", "/* two */"), "k.cu")
    assert _digest(cuda, "k.cu") != _digest(cuda.replace("x + 1", "x - 1"), "k.cu")


def test_a_module_moved_to_its_room_keeps_its_digest_unless_its_code_changed():
    """The package's own imports are wiring, left out of the digest; any other import is code."""
    from onlinesoftmax.measure.freshness import _digest

    old = "from onlinesoftmax.kernels import softmax_fast as kf\nimport numpy as np\nX = np.float32(kf.VEC)\n"
    moved = "from onlinesoftmax.kernels.softmax import fast as kf\nimport numpy as np\nX = np.float32(kf.VEC)\n"
    assert _digest(old, "m.py") == _digest(moved, "m.py")
    assert _digest(old, "m.py") != _digest(old.replace("import numpy as np", "import cupy as np"), "m.py")
    assert _digest(old, "m.py") != _digest(moved.replace("kf.VEC", "kf.VEC + 1"), "m.py")


def test_every_moved_source_is_where_the_map_says():
    for old, new in freshness.MOVED.items():
        assert not (REPO_ROOT / old).exists(), f"{old} is still there: drop it from MOVED or finish the move"
        assert (REPO_ROOT / new).is_file(), f"MOVED names {new}, which does not exist"
