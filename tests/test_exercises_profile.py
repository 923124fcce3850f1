"""The graders of the profiling exercises: torch.softmax's dispatch (chapter 03) and the fraction
of the copy ceiling from recorded data (chapter 06) accept the solutions and reject wrong answers
with a message that says what is wrong."""
import importlib.util

import numpy as np
import pytest

from onlinesoftmax.book.exercises import exercises_profile as ep


def stub(*args):
    ...   # the reader's stub


DISPATCH_WRONG = [
    (stub, "not answered yet"),
    (lambda n, b: "softmax_warp_forward" if n <= 1024 else "cunn_SoftMaxForward", "yours is cunn_SoftMaxForward, SoftMax.cu launches cunn_SoftMaxForwardSmem"),
    (lambda n, b: "softmax_warp_forward" if n * b <= 4096 else "cunn_SoftMaxForwardSmem", "N = 65536, 4-byte elements"),
    (lambda n, b: "cunn_SoftMaxForwardSmem" if n <= 12288 and n > 1024 else "softmax_warp_forward", "N = 65536"),
    (lambda n, b: "softmax", "'softmax' is none of"),
    (lambda n, b: 1, "expected a kernel name (a str), got int"),
    (lambda n, b: ("softmax_warp_forward",), "expected a kernel name (a str), got tuple"),
    (lambda n: "softmax_warp_forward", "raised TypeError"),
]


def test_the_dispatch_solution_passes(capsys):
    assert ep.check_torch_dispatch(ep.solution_torch_softmax_kernel)
    assert capsys.readouterr().out.strip() == "torch_dispatch: passed"


def test_the_dispatch_follows_softmax_cu_at_the_three_sizes_of_the_exercise():
    assert [ep.torch_softmax_kernel_reference(n, 4) for n in (1024, 4096, 65536)] == [
        "softmax_warp_forward", "cunn_SoftMaxForwardSmem", "cunn_SoftMaxForward"]
    assert ep.torch_softmax_kernel_reference(2048, 2) == "cunn_SoftMaxForwardSmem"   # 4096 bytes but N > 1024
    assert ep.torch_softmax_kernel_reference(4097, 4) == "cunn_SoftMaxForward"       # not a multiple of 4


@pytest.mark.parametrize("index", range(len(DISPATCH_WRONG)))
def test_dispatch_rejects_each_wrong_answer(index, capsys):
    answer, message = DISPATCH_WRONG[index]
    assert not ep.check_torch_dispatch(answer)
    out = capsys.readouterr().out
    assert message in out and "passed" not in out, out


def test_the_profiler_names_are_recognised():
    assert ep.short_kernel_name("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, "
                                "false>(float*, float const*, int, int, int, bool const*, int, bool)") == ep.PERSISTENT
    assert ep.short_kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForwardSmem<4, float, float, "
                                "float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)") == ep.SHARED
    assert ep.short_kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                                "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)") == ep.BLOCK
    assert ep.short_kernel_name("void at::native::vectorized_elementwise_kernel<4>(int)") is None


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_without_torch_kernels_launched_says_what_it_needs(capsys):
    assert ep.kernels_launched(1024) is None
    assert "needs torch and a GPU" in capsys.readouterr().out


def half_the_bytes(data, dtype, n_rows, n_cols):
    return ep.solution_copy_fraction(data, dtype, n_rows, n_cols) / 2


def seconds_as_ms(data, dtype, n_rows, n_cols):
    return ep.solution_copy_fraction(data, dtype, n_rows, n_cols) * 1e-3


def the_recorded_field(data, dtype, n_rows, n_cols):
    return next(r["fraction_of_copy"] for r in data["rows"] if r.get("kernel") == "softmax_08_registers")


def one_shape_only(data, dtype, n_rows, n_cols):
    return ep.solution_copy_fraction(data, "float32", 4000, 4096)


COPY_WRONG = [
    (stub, "not answered yet"),
    (half_the_bytes, "counted only the bytes read"),
    (seconds_as_ms, "a time in ms used as seconds"),
    (the_recorded_field, "raised KeyError"),          # the derived fields are taken out
    (one_shape_only, "FAILED on bfloat16, 4000 x 1024: fraction is"),
    (lambda data, dtype, n_rows, n_cols: (0.9, 0.9), "expected 1 value (fraction), got 2"),
    (lambda data, dtype, n_rows, n_cols: "0.9", "got str"),
    (lambda data, dtype, n_rows, n_cols: np.full((1,), 0.9), "fraction has shape (1,), expected ()"),
]


def test_the_copy_fraction_solution_passes_and_agrees_with_the_recorded_field(capsys):
    assert ep.check_copy_fraction(ep.solution_copy_fraction)
    assert capsys.readouterr().out.strip() == "copy_fraction: passed"
    data = ep.load_softmax_fast()
    row = next(r for r in data["rows"] if r.get("kernel") == "softmax_08_registers" and r["dtype"] == "float32"
               and r["n_rows"] == 4000 and r["n_cols"] == 4096)
    assert ep.copy_fraction_reference(data, "float32", 4000, 4096) == pytest.approx(row["fraction_of_copy"], rel=1e-9)


@pytest.mark.parametrize("index", range(len(COPY_WRONG)))
def test_copy_fraction_rejects_each_wrong_answer(index, capsys):
    answer, message = COPY_WRONG[index]
    assert not ep.check_copy_fraction(answer)
    out = capsys.readouterr().out
    assert message in out and "passed" not in out, out


def test_the_grader_leaves_the_recorded_data_alone():
    data = ep.load_softmax_fast()
    ep.check_copy_fraction(ep.solution_copy_fraction, data=data, quiet=True)
    assert all("fraction_of_copy" in r for r in data["rows"] if r.get("kernel") == "softmax_08_registers")


def test_the_ncu_log_is_read_as_kernel_names_in_launch_order():
    log = "\n".join([
        "==PROF== Connected to process 1234",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
        '"1","1234","python","host","void at::native::(anonymous namespace)::cunn_SoftMaxForwardSmem<4, float>(float *, '
        'const float *, int)","1","7","(1024, 1, 1)","(4000, 1, 1)","0","9.0","Command line profiler metrics",'
        '"gpu__time_duration.sum","ns","21,344"',
        '"0","1234","python","host","void softmax_warp_forward<float, float, float, 10, false, false>(float *, const '
        'float *, int, int, int, const bool *, int, bool)","1","7","(128, 1, 1)","(1000, 1, 1)","0","9.0",'
        '"Command line profiler metrics","gpu__time_duration.sum","ns","9,000"',
        "==PROF== Disconnected from process 1234"])
    names = ep.parse_ncu_kernels(log)
    assert [ep.short_kernel_name(n) for n in names] == ["softmax_warp_forward", "cunn_SoftMaxForwardSmem"]


def test_without_ncu_the_ncu_helper_says_nothing_and_gives_none(monkeypatch):
    monkeypatch.setattr(ep.shutil, "which", lambda name: None)
    assert ep.kernels_launched_ncu(1024) is None
