"""kernel_exercises.verify_chapter on a GPU: a starter whose values come out right by luck (a missing
barrier) is rejected by the emulator's race check, in seconds, and compute-sanitizer's racecheck runs
only where the emulator cannot. The GPU is stood in for: every launch "passes", as a lucky race does."""
import pytest

from onlinesoftmax.book.exercises import kernel_exercises as ke
from onlinesoftmax.runtime import emulator

pytestmark = pytest.mark.skipif(not emulator.available(), reason="the CPU emulator needs g++")


@pytest.fixture
def lucky_gpu(monkeypatch):
    """Every GPU launch passes; the emulator runs for real; racecheck records that it was asked."""
    asked = []
    monkeypatch.setattr(ke, "_backend_here", lambda: "gpu")
    monkeypatch.setattr(ke, "run_many", lambda jobs, workers=8: [{"passed": True} for _ in jobs])
    monkeypatch.setattr(ke, "racecheck", lambda path, name, **_: asked.append(name) or {"passed": False, "hazards": []})
    return asked


def test_a_lucky_starter_goes_to_the_emulator_not_to_racecheck(lucky_gpu):
    assert ke.uses_shared_memory(ke.STARTERS / "split_merge.cu")
    assert ke.verify_chapter("04") == ["split_merge"]               # the starter rejected by the emulator
    assert lucky_gpu == []                                          # and no compute-sanitizer run


def test_without_the_emulator_racecheck_decides(lucky_gpu, monkeypatch):
    monkeypatch.setattr(emulator, "available", lambda: False)
    assert ke.verify_chapter("04") == ["split_merge"]
    assert lucky_gpu == ["split_merge"]


def test_a_lucky_starter_that_nothing_rejects_fails_the_chapter(lucky_gpu, monkeypatch):
    """The wrong answer: trusting the GPU's lucky values (or a check that passes everything)."""
    monkeypatch.setattr(ke, "run", lambda *a, **k: {"passed": True})
    with pytest.raises(AssertionError, match="starters/split_merge.cu"):
        ke.verify_chapter("04")


def test_on_a_gpu_starters_keep_the_emulator_and_solutions_skip_it(monkeypatch):
    """Solutions are judged by their GPU values (the emulator's pass over them is a CPU-tier test and
    takes tens of seconds for chapter 08's); a starter keeps the emulator's checks after lucky values.
    The wrong answers: a starter run without them, or every solution emulated again in the page."""
    jobs_seen = []
    monkeypatch.setattr(ke, "_backend_here", lambda: "gpu")
    monkeypatch.setattr(ke, "run_many", lambda jobs, workers=8: jobs_seen.extend(jobs) or
                        [{"passed": job["path"].parent == ke.SOLUTIONS} for job in jobs])
    assert ke.verify_chapter("08") == ["fix_attention_barrier", "fix_attention_tail"]
    assert {(job["path"].parent.name, job["emulate"]) for job in jobs_seen} == {("solutions", False), ("starters", True)}
    assert '"emulate": false' in ke._command("grade", [("fix_tail", ke.SOLUTIONS / "fix_tail.cu")], "gpu", False,
                                             emulate=False)[-1]
