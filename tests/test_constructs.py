"""Every CUDA construct a page uses is introduced before or where it is first used: in the primer (the
GPU primer and its section "Your first kernel") or, for the constructs of one technique, on the first
page that uses it. "Used" means in a page's code or in a kernel file it includes; "introduced" means
named in the prose (not only in code) of the introducing page. A page that uses a construct before
the page this table names, or an introducing page whose prose never names it, fails."""
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import reading_time  # noqa: E402  (its prose(): the text without code, math and directive options)

PRIMER = ("chapters/00_gpu_primer", "chapters/00_first_kernel")
# construct: (its pattern in code, its pattern in prose, where it is introduced)
CONSTRUCTS = {
    "__global__": (r"__global__", r"__global__", PRIMER),
    "threadIdx / blockIdx / blockDim": (r"threadIdx|blockIdx|blockDim", r"threadIdx", PRIMER),
    "__shared__": (r"__shared__", r"__shared__|shared memory", PRIMER),
    "__syncthreads": (r"__syncthreads", r"__syncthreads", PRIMER),
    "__shfl_xor_sync": (r"__shfl_xor_sync", r"__shfl_xor_sync", PRIMER),
    "__device__": (r"__device__", r"__device__", PRIMER),
    "__restrict__": (r"__restrict__", r"__restrict__", PRIMER),
    "__launch_bounds__": (r"__launch_bounds__", r"__launch_bounds__", PRIMER),
    "#pragma unroll": (r"#pragma unroll", r"#pragma unroll", PRIMER),
    "16-byte vectors (float4, uint4)": (r"\bfloat4\b|\buint4\b", r"float4", PRIMER),
    "dynamic shared memory": (r"extern __shared__", r"extern __shared__", PRIMER),
    "__shfl_sync (a broadcast)": (r"__shfl_sync\b", r"__shfl_sync", ("chapters/03_online_kernel",)),
    "exp2f": (r"exp2f|ex2\.approx", r"exp2f|ex2\.approx", ("chapters/05_lse_kernels",)),
    "atomics": (r"atomicAdd|atomicMax|atomicCAS", r"atomic", ("chapters/06_copy_ceiling",)),
    "cp.async": (r"cp\.async", r"cp\.async", ("chapters/06_copy_ceiling",)),
    "thread-block clusters": (r"__cluster_dims__|cluster\.sync|map_shared_rank|cluster_ctarank", r"cluster",
                              ("chapters/06_copy_ceiling",)),
    "programmatic dependent launch": (r"griddepcontrol|cudaGridDependencySynchronize", r"dependent launch|griddepcontrol",
                                      ("chapters/06_copy_ceiling",)),
    "mma.sync": (r"mma\.sync", r"mma\.sync", ("chapters/08_blocked_attention", "chapters/09_tensor_core_attention")),
    "ldmatrix": (r"ldmatrix", r"ldmatrix", ("chapters/09_tensor_core_attention",)),
    "__ldcg (a load past L1)": (r"__ldcg", r"__ldcg", ("chapters/13_sampling_split",)),
}


def pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = []
    for entry in toc["chapters"]:
        found.append(entry["file"])
        found += [section["file"] for section in entry.get("sections", [])]
    return found


def code_of(page: str) -> str:
    """The page's code: what is not prose, and the kernel files it includes."""
    text = (ROOT / f"{page}.md").read_text()
    prose = set(reading_time.prose(text).splitlines())
    code = "\n".join(line for line in text.splitlines() if line not in prose)
    for included in re.findall(r"\{literalinclude\}\s+(\S+)", text):
        path = (ROOT / page).parent / included
        if path.is_file():
            code += "\n" + path.read_text()
    return code


@pytest.mark.parametrize("construct", CONSTRUCTS)
def test_each_construct_is_introduced_where_it_is_first_used(construct):
    code_pattern, prose_pattern, introduced_in = CONSTRUCTS[construct]
    order = pages()
    users = [page for page in order if re.search(code_pattern, code_of(page))]
    assert users, f"{construct}: no page uses it; drop it from the table"
    first = order.index(users[0])
    assert first >= min(order.index(page) for page in introduced_in), \
        f"{construct}: used in {users[0]} before it is introduced in {introduced_in}"
    explained = [page for page in introduced_in
                 if re.search(prose_pattern, reading_time.prose((ROOT / f"{page}.md").read_text()))]
    assert explained, f"{construct}: the prose of {introduced_in} never names it"


def test_the_table_is_not_blind():
    """A construct used only after the page that names it, and a page that names nothing, both fail."""
    assert re.search(CONSTRUCTS["ldmatrix"][0], code_of("chapters/09_tensor_core_attention"))
    assert not re.search(CONSTRUCTS["ldmatrix"][1], reading_time.prose("```\nldmatrix\n```\nno such word here"))
