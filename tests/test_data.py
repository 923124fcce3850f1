"""CPU tier: every recorded result file has provenance and a well-formed body."""
import json
import re

import pytest

import onlinesoftmax as osm
from onlinesoftmax.measure.results import DATA_DIR, META_KEYS, RETIRED_NAMES, host_slug, provenance

FILES = sorted(DATA_DIR.glob("*/*.json"))
BASELINE = re.compile(r"^(copy|copy_\w+|read|cupy_\w+|torch_\w+|fast|(torch|cupyx?)\.[\w.]+"
                      r"|(liger|quack|flashinfer)(_\w+)?)$")  # library calls by their Python path too; peers' kernels


# A registry key, or (record_guards_gpu.py) a registered variant rebuilt with ONLINE_SOFTMAX_GUARDS=0 and
# named with the registry's define-build suffix, as softmax_02_online_unguarded is.
DEFINE_SUFFIXES = ("_unguarded",)


QUALIFIED = re.compile(r"^(\w+) \([a-z0-9 ]+\)$")   # a kernel with the mode it ran in: "... (deterministic)", "... (3)"
# The first page's own kernels (exercises/primer/<name>.cu: vector_add, shared_reads), timed by the first-kernel suite.
PRIMER_KERNELS = {path.stem for path in (DATA_DIR.parent / "exercises" / "primer").glob("*.cu")}


def recorded_kernel_name_ok(name) -> bool:
    if not isinstance(name, str):
        return False
    qualified = QUALIFIED.match(name)
    if qualified:
        name = qualified[1]
    known = set(osm.REGISTRY)
    return (name in known or name in RETIRED_NAMES.values() or bool(BASELINE.match(name)) or name in PRIMER_KERNELS
            or any(name == key + suffix for key in known for suffix in DEFINE_SUFFIXES))


def test_kernel_name_check_is_exact():
    assert recorded_kernel_name_ok("softmax_03_online_masked_unguarded")
    assert recorded_kernel_name_ok("softmax_08_registers") and recorded_kernel_name_ok("torch.softmax")
    assert recorded_kernel_name_ok("attention_backward_01_blocked (deterministic)")
    assert recorded_kernel_name_ok("vector_add") and recorded_kernel_name_ok("shared_reads")
    for bad in ("softmax_08_registers_typo", "softmax_02_online_fp16", "softmax_03_online_masked_unguardedx", None,
                "softmax_08_typo (deterministic)", "softmax_08_registers (Deterministic!)", "vector_add2", "row_sum"):
        assert not recorded_kernel_name_ok(bad), bad


def test_data_holds_measured_suites_only():
    """Logs of what ran (test tiers, chapters, sanitizers, probes) live in logs/, not next to the suites."""
    others = [str(p.relative_to(DATA_DIR)) for p in DATA_DIR.rglob("*") if p.is_file() and p.suffix != ".json"]
    assert not others, f"not a recorded suite, move to logs/: {others}"


def test_there_is_recorded_data():
    assert FILES, "no recorded GPU data under data/"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_result_file(path):
    data = json.loads(path.read_text())
    meta, rows = data["meta"], data["rows"]
    for key in META_KEYS:
        assert meta.get(key) not in (None, ""), f"meta.{key} missing"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.json", path.name)
    assert path.name.startswith(meta["date"]) and path.name[11:-5] == meta["suite"]
    assert re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", meta["git_commit"]), "a real commit"
    assert path.parent.name == host_slug(meta), "data/<gpu>/ for one GPU, data/<gpu>x<n>/ for n GPUs"
    assert rows and provenance(meta)
    for row in rows:
        name = row.get("kernel")
        assert recorded_kernel_name_ok(name), f"unknown kernel {name}"
        if "ms" in row:
            assert row["ms"] > 0
        if "GBps" in row:
            assert 0 < row["GBps"] < 10_000, "GB/s beyond any HBM"


def test_the_folder_of_a_multi_gpu_run():
    assert host_slug({"gpu": "NVIDIA H200"}) == "h200"
    assert host_slug({"gpu": "NVIDIA H200", "gpu_count": 2}) == "h200x2"
