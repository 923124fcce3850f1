"""The CUDA exercises' machinery on CPU: every starter and solution builds, a compile error names
the reader's line, the reader's copy is never the book's kernel, and the runner's faults (a hang,
a crash) come back as reports, not exceptions. tests/gpu/test_kernel_exercises_gpu.py runs them."""
import importlib.util
import subprocess

import pytest

from onlinesoftmax.book import kernel_exercises as kx
from onlinesoftmax.runtime import loader

try:
    import cuda.bindings.nvrtc  # noqa: F401
    HAVE_COMPILER = True
except ImportError:
    HAVE_COMPILER = loader.nvcc_available()


def test_every_exercise_has_a_starter_and_a_solution_with_its_entry():
    for name in kx.EXERCISES:
        for folder in (kx.STARTERS, kx.SOLUTIONS):
            text = (folder / f"{name}.cu").read_text()
            assert f'extern "C" __global__ void {name}(' in text, (folder, name)
    for name in kx.EXERCISES:
        if name.startswith("fix_"):   # a fix-the-bug starter differs from its solution
            assert (kx.STARTERS / f"{name}.cu").read_text() != (kx.SOLUTIONS / f"{name}.cu").read_text()


@pytest.mark.skipif(not HAVE_COMPILER, reason="needs nvcc or NVRTC")
@pytest.mark.parametrize("folder", ["starters", "solutions"])
@pytest.mark.parametrize("name", list(kx.EXERCISES))
def test_every_starter_and_solution_builds(name, folder):
    ok, log = kx.build(kx.EXERCISES_DIR / folder / f"{name}.cu")
    assert ok, log
    if importlib.util.find_spec("cuda") is not None:
        assert "NVRTC" in log, "built with NVRTC too: the compiler cupy runs the exercise with"


@pytest.mark.skipif(not HAVE_COMPILER, reason="needs nvcc or NVRTC")
def test_a_compile_error_names_the_readers_line(tmp_path):
    path = tmp_path / "mine.cu"
    text = (kx.SOLUTIONS / "online_softmax.cu").read_text().splitlines()
    line = next(i for i, t in enumerate(text) if "const float inv_l" in t) + 1
    text[line - 1] = text[line - 1].replace("row.l", "row.q")
    path.write_text("\n".join(text) + "\n")
    ok, log = kx.build(path)
    assert not ok and "mine.cu" in log and str(line) in log, log


def test_start_copies_the_starter_once(tmp_path, monkeypatch):
    monkeypatch.setattr(kx, "EXERCISES_DIR", tmp_path)
    path = kx.start("fix_tail")
    assert path == tmp_path / "fix_tail.cu" and path.read_text() == (kx.STARTERS / "fix_tail.cu").read_text()
    path.write_text("// mine")
    assert kx.start("fix_tail").read_text() == "// mine", "the reader's edits are kept"
    assert not str(path).startswith(str(loader.KERNELS_DIR))
    with pytest.raises(ValueError, match="known"):
        kx.start("fix_everything")


def test_a_hang_and_a_crash_are_reports(monkeypatch):
    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs["timeout"])
    monkeypatch.setattr(subprocess, "run", hang)
    result = kx.run(kx.SOLUTIONS / "fix_tail.cu", "fix_tail", timeout_s=3)
    assert not result["passed"] and "did not finish in 3 s" in result["fault"]
    assert "notebook's own GPU context is unaffected" in kx.report("fix_tail", result)

    def crash(*args, **kwargs):
        return subprocess.CompletedProcess(args[0], 1, "", "cupy...CUDARuntimeError: cudaErrorIllegalAddress")
    monkeypatch.setattr(subprocess, "run", crash)
    result = kx.run(kx.SOLUTIONS / "fix_tail.cu", "fix_tail")
    assert not result["passed"] and "cudaErrorIllegalAddress" in result["fault"] and "exit 1" in result["fault"]


def test_a_wrong_row_is_reported_with_its_input():
    text = kx.report("fix_tail", {"passed": False, "case": "3 rows of 257", "index": [1, 256], "yours": [0.5, 0.5],
                                  "expected": [0.25, 0.75], "input": [1.0, 2.0], "unwritten": 0})
    assert "FAILED on 3 rows of 257: y(1, 256)" in text and "input row" in text and "yours:" in text


def test_without_a_gpu_it_builds_and_says_what_needs_one(capsys, monkeypatch):
    from onlinesoftmax.runtime import device

    monkeypatch.setattr(device, "has_gpu", lambda: False)
    if not HAVE_COMPILER:
        pytest.skip("needs nvcc or NVRTC")
    assert not kx.grade("fix_tail", path=kx.SOLUTIONS / "fix_tail.cu")
    assert "needs an NVIDIA GPU" in capsys.readouterr().out
