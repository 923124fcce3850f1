"""The Nsight Compute suites' shared runner (onlinesoftmax/bench/ncu.py) against a stand-in for ncu: the
command it builds, the launches it reads back in order, and the launch-order check, which must refuse
a missing or a wrong launch."""
import math
import stat
import sys

import pytest

from onlinesoftmax.bench import ncu

FAKE_NCU = '''#!{python}
import sys
args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
with open(log, "w") as f:
    f.write('==PROF== a line ncu prints, not a record\\n')
    f.write('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\\n')
    for launch, name in ((1, "copy_logits"), (0, "cross_entropy_01_rows_bf16")):
        f.write(f'"{{launch}}","{{name}}","dram__bytes_read.sum","byte","1,{{launch}}00"\\n')
        f.write(f'"{{launch}}","{{name}}","gpu__time_duration.sum","ns","{{launch + 7}}"\\n')
'''


@pytest.fixture
def fake_ncu(tmp_path):
    path = tmp_path / "ncu"
    path.write_text(FAKE_NCU.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_the_launches_come_back_in_launch_order_with_their_units(fake_ncu):
    launches, command = ncu.profile("onlinesoftmax.bench.ncu_cross_entropy", ("dram__bytes_read.sum",),
                                    "regex:^x", ("--cache-control", "all"), ncu=fake_ncu)
    assert command[1:8] == ["--clock-control", "none", "--cache-control", "all", "--metrics", "dram__bytes_read.sum",
                            "--kernel-name"]
    assert command[-3:] == ["-m", "onlinesoftmax.bench.ncu_cross_entropy", "--child"]
    assert [launch["kernel_name"] for launch in launches] == ["cross_entropy_01_rows_bf16", "copy_logits"]
    assert launches[1]["dram__bytes_read.sum"] == (1100.0, "byte")   # "1,100": the thousands separator read
    assert launches[0]["gpu__time_duration.sum"] == (7.0, "ns")


def test_the_order_check_refuses_a_missing_or_a_wrong_launch():
    launches = [{"kernel_name": "cross_entropy_01_rows_bf16"}, {"kernel_name": "copy_logits"}]
    ncu.check_order(launches, ["cross_entropy_01_rows", "copy_logits"])
    with pytest.raises(SystemExit, match="expected 3 profiled launches, got 2"):
        ncu.check_order(launches, ["cross_entropy_01_rows", "copy_logits", "copy_logits"])
    with pytest.raises(SystemExit, match="planned cross_entropy_02_cluster, profiled cross_entropy_01_rows_bf16"):
        ncu.check_order(launches, ["cross_entropy_02_cluster", "copy_logits"])


def test_a_failing_ncu_is_an_error_with_its_output(tmp_path):
    failing = tmp_path / "ncu"
    failing.write_text(f"#!{sys.executable}\nimport sys\nprint('no GPU here')\nsys.exit(3)\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(SystemExit, match=r"ncu failed \(3\):\nno GPU here"):
        ncu.profile("onlinesoftmax.bench.ncu_dram", ("dram__bytes_read.sum",), "regex:^softmax_", ncu=str(failing))


def test_the_dram_suite_counts_every_unit_in_bytes():
    from onlinesoftmax.bench import ncu_dram

    launch = {"kernel_name": "softmax_02_online", "dram__bytes_read.sum": (2.0, "Mbyte"),
              "dram__bytes_write.sum": (5.0, "")}
    assert ncu_dram.in_bytes(launch) == {"kernel_name": "softmax_02_online", "dram__bytes_read.sum": 2e6,
                                         "dram__bytes_write.sum": 5.0}


def test_a_metric_the_launch_lacks_is_recorded_as_nan_with_no_unit():
    launch = {"kernel_name": "sampling_01_rows_bf16", "gpu__time_duration.sum": (2.5e5, "ns")}
    row = ncu.metric_values(launch, ["gpu__time_duration.sum", "dram__bytes_read.sum"])
    assert row["gpu__time_duration.sum"] == 2.5e5 and row["gpu__time_duration.sum.unit"] == "ns"
    assert math.isnan(row["dram__bytes_read.sum"]) and row["dram__bytes_read.sum.unit"] == ""
    assert ncu.summary(row, ["gpu__time_duration.sum"]) == "time_duration 2.5e+05"
