"""Every CUDA construct a page uses is introduced before or where it is first used: in the primer (the
GPU primer and its section "Your first kernel") or, for the constructs of one technique, on the first
page that uses it. "Used" means in a page's code or in what its literalincludes show of a kernel file;
"introduced" means named in the prose (not only in code) of an introducing page at or before that
use. Every CUDA intrinsic or qualifier the pages' code names must be in the table (no hand-picked
subset). A page that uses a construct before an introducing page names it, an introducing page whose
prose never names it, or a CUDA name outside the table, fails."""
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
    "__syncthreads": (r"__syncthreads\b", r"__syncthreads\b", PRIMER),
    "__shfl_xor_sync": (r"__shfl_xor_sync", r"__shfl_xor_sync", PRIMER),
    "__device__": (r"__device__", r"__device__", PRIMER),
    "__restrict__": (r"__restrict__", r"__restrict__", PRIMER),
    "__launch_bounds__": (r"__launch_bounds__", r"__launch_bounds__", PRIMER),
    "#pragma unroll": (r"#pragma unroll", r"#pragma unroll", PRIMER),
    "16-byte vectors (float4, uint4)": (r"\bfloat4\b|\buint4\b", r"float4", PRIMER),
    "dynamic shared memory": (r"extern __shared__", r"extern __shared__", PRIMER),
    "__forceinline__": (r"__forceinline__", r"__forceinline__", PRIMER),
    "__shfl_sync (a broadcast)": (r"__shfl_sync\b", r"__shfl_sync", ("chapters/03_online_kernel",)),
    "exp2f": (r"exp2f|ex2\.approx", r"exp2f|ex2\.approx", ("chapters/05_lse_kernels",)),
    "__syncthreads_or (a barrier that votes)": (r"__syncthreads_or", r"__syncthreads_or", ("chapters/05_lse_kernels",)),
    "__int_as_float (a bit cast)": (r"__int_as_float", r"__int_as_float", ("chapters/05_lse_kernels",)),
    "__float_as_uint": (r"__float_as_uint", r"__float_as_uint", ("chapters/05_lse_kernels",)),
    "__uint_as_float": (r"__uint_as_float", r"__uint_as_float", ("chapters/05_lse_kernels",)),
    "__fmul_rn (no fused multiply-add)": (r"__fmul_rn", r"__fmul_rn", ("chapters/03_online_kernel",)),
    "__fadd_rn": (r"__fadd_rn", r"__fadd_rn", ("chapters/11_gradients_and_pytorch",)),
    "__ldg (a read-only load)": (r"__ldg\b", r"__ldg\b", ("chapters/06_registers_and_shared",)),
    "__cvta_generic_to_global": (r"__cvta_generic_to_global", r"__cvta_generic_to_global",
                                 ("chapters/06_registers_and_shared",)),
    "__cvta_generic_to_shared": (r"__cvta_generic_to_shared", r"__cvta_generic_to_shared",
                                 ("chapters/06_clusters_and_long_rows",)),
    "__align__": (r"__align__", r"__align__", ("chapters/06_clusters_and_long_rows",)),
    "__any_sync (a warp vote)": (r"__any_sync", r"__any_sync", ("chapters/07_topk_kernels",)),
    "__ffs": (r"__ffs\b", r"__ffs\b", ("chapters/07_topk_kernels",)),
    "__shfl_up_sync (a warp scan)": (r"__shfl_up_sync", r"__shfl_up_sync", ("chapters/07_topk_split",)),
    "__ballot_sync": (r"__ballot_sync", r"__ballot_sync", ("chapters/13_sampling",)),
    "__popc": (r"__popc\b", r"__popc\b", ("chapters/13_sampling",)),
    "__reduce_add_sync": (r"__reduce_add_sync", r"__reduce_add_sync", ("chapters/13_sampling",)),
    "__noinline__": (r"__noinline__", r"__noinline__", ("chapters/13_sampling",)),
    "__syncwarp (a warp's barrier)": (r"__syncwarp\b", r"__syncwarp\b", ("chapters/13_sampling",)),
    "__reduce_max_sync": (r"__reduce_max_sync", r"__reduce_max_sync", ("chapters/13_sampling",)),
    "__threadfence": (r"__threadfence\b", r"__threadfence\b", ("chapters/13_sampling_split",)),
    "__nanosleep": (r"__nanosleep", r"__nanosleep", ("chapters/appendix_measured",)),
    "atomics": (r"atomicAdd|atomicMax|atomicCAS", r"atomic", ("chapters/06_copy_ceiling",)),
    "cp.async": (r"cp\.async", r"cp\.async", ("chapters/06_copy_ceiling",)),
    "thread-block clusters": (r"__cluster_dims__|cluster\.sync|map_shared_rank|cluster_ctarank", r"cluster",
                              ("chapters/06_copy_ceiling",)),
    "programmatic dependent launch": (r"griddepcontrol|cudaGridDependencySynchronize", r"dependent launch|griddepcontrol",
                                      ("chapters/06_copy_ceiling",)),
    "mma.sync": (r"mma\.sync", r"mma\.sync", ("chapters/08_decode_split",)),
    "ldmatrix": (r"ldmatrix", r"ldmatrix", ("chapters/09_tensor_core_attention",)),
}


def pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    found = []
    for entry in toc["chapters"]:
        found.append(entry["file"])
        found += [section["file"] for section in entry.get("sections", [])]
    return found


INCLUDE = re.compile(r"```\{literalinclude\}\s+(\S+)\n((?::[\w-]+:.*\n)*)")


def excerpt(source: str, options: str) -> str:
    """What a literalinclude shows of `source`, as Sphinx cuts it: from the line holding :start-at: (or
    the one after :start-after:) up to the line before :end-before: (or through :end-at:), the end
    searched after the start; then :lines: of that. Other options (:pyobject:) keep the whole file."""
    opts = dict((name, value.strip().strip('"')) for name, value in re.findall(r":([\w-]+):\s*(.*)", options))
    lines = source.splitlines()
    start = 0
    for name, skip in (("start-at", 0), ("start-after", 1)):
        if name in opts:
            start = next(i for i, line in enumerate(lines) if opts[name] in line) + skip
    end = len(lines)
    for name, extra in (("end-before", 0), ("end-at", 1)):
        if name in opts:
            end = next(i for i in range(start, len(lines)) if opts[name] in lines[i]) + extra
    lines = lines[start:end]
    if "lines" in opts:
        keep = []
        for part in opts["lines"].split(","):
            lo, _, hi = part.strip().partition("-")
            keep += lines[int(lo) - 1:int(hi or lo)]
        lines = keep
    return "\n".join(lines)


def code_of(page: str) -> str:
    """The page's code: what is not prose, and what its literalincludes show of the files they name."""
    text = (ROOT / f"{page}.md").read_text()
    prose = set(reading_time.prose(text).splitlines())
    code = "\n".join(line for line in text.splitlines() if line not in prose)
    for included, options in INCLUDE.findall(text):
        path = (ROOT / page).parent / included
        if path.is_file():
            code += "\n" + excerpt(path.read_text(), options)
    return code


# CUDA's own qualifiers spelt __x__; any other __x__ in a page's code is a Python name (__init__, __name__)
CUDA_QUALIFIERS = {"__global__", "__device__", "__host__", "__shared__", "__constant__", "__managed__",
                   "__restrict__", "__forceinline__", "__noinline__", "__align__", "__launch_bounds__",
                   "__grid_constant__", "__cluster_dims__"}


def cuda_names(code: str) -> set[str]:
    """The CUDA intrinsics and qualifiers a piece of code names (__ffs, __shared__; not Python's __init__)."""
    return {name for name in re.findall(r"\b__[a-z][a-z0-9_]*\b", code)
            if not name.endswith("__") or name in CUDA_QUALIFIERS}


def problems(construct: str, codes: dict[str, str], proses: dict[str, str]) -> list[str]:
    """What is wrong with one construct of the table, given each page's code and prose in book order:
    it is used before the first of its introducing pages that names it, or none of them names it."""
    code_pattern, prose_pattern, introduced_in = CONSTRUCTS[construct]
    order = list(codes)
    users = [page for page in order if re.search(code_pattern, codes[page])]
    if not users:
        return [f"{construct}: no page uses it; drop it from the table"]
    named = [page for page in introduced_in if re.search(prose_pattern, proses[page])]
    if not named:
        return [f"{construct}: the prose of {introduced_in} never names it"]
    first_named = min(order.index(page) for page in named)
    if order.index(users[0]) < first_named:
        return [f"{construct}: used in {users[0]} before {order[first_named]} names it"]
    return []


def uncovered(codes: dict[str, str]) -> dict[str, str]:
    """{name: first page using it} for each CUDA name in the pages' code that no construct's pattern covers."""
    patterns = [code for code, _, _ in CONSTRUCTS.values()]
    found = {}
    for page, code in codes.items():
        for name in sorted(cuda_names(code)):
            if name not in found and not any(re.fullmatch(f"(?:{p})", name) for p in patterns):
                found[name] = page
    return found


@pytest.fixture(scope="module")
def book_pages():
    order = pages()
    return ({page: code_of(page) for page in order},
            {page: reading_time.prose((ROOT / f"{page}.md").read_text()) for page in order})


@pytest.mark.parametrize("construct", CONSTRUCTS)
def test_each_construct_is_introduced_where_it_is_first_used(construct, book_pages):
    found = problems(construct, *book_pages)
    assert not found, found[0]


def test_every_cuda_name_in_the_book_is_in_the_table(book_pages):
    """The table is not a hand-kept subset: every intrinsic or qualifier that a page's code (or the
    excerpt of a kernel it shows) names is one of its constructs."""
    missing = uncovered(book_pages[0])
    assert not missing, f"CUDA names the table does not list (name: first page): {missing}"


def test_the_table_is_not_blind(book_pages):
    """Each rule fails where it should: a construct used before its introducing page names it, an
    introducing page whose prose names it only in code, a CUDA name outside the table."""
    codes, proses = book_pages
    assert re.search(CONSTRUCTS["ldmatrix"][0], codes["chapters/09_tensor_core_ladder"])
    assert not re.search(CONSTRUCTS["ldmatrix"][1], reading_time.prose("```\nldmatrix\n```\nno such word here"))
    # __ffs shown on a page before the one that introduces it
    early = dict(codes, **{"chapters/01_softmax_and_overflow": codes["chapters/01_softmax_and_overflow"] + "\n__ffs(x)"})
    assert problems("__ffs", early, proses) and "used in chapters/01_softmax_and_overflow" in problems("__ffs", early, proses)[0]
    # the introducing page's prose without the name
    silent = dict(proses, **{"chapters/07_topk_kernels": proses["chapters/07_topk_kernels"].replace("__ffs", "a bit scan")})
    assert problems("__ffs", codes, silent) == [f"__ffs: the prose of {CONSTRUCTS['__ffs'][2]} never names it"]
    # a name the table does not list (and Python's own names left alone)
    assert uncovered({"p": "x = __brev(y); __init__; __nv_bfloat16"}) == {"__brev": "p", "__nv_bfloat16": "p"}
    assert uncovered({"p": "__syncthreads(); __syncthreads_or(a); __ldg(p); __ldcg(p)"}) == {"__ldcg": "p"}
    assert cuda_names("def __init__(self): __name__; __align__(8) __ffs(m)") == {"__align__", "__ffs"}
    # the excerpt a literalinclude shows, not the whole file
    source = "a\n// start\nb __ffs\n// end\nc __popc"
    assert excerpt(source, ':start-at: "// start"\n:end-before: "// end"\n') == "// start\nb __ffs"
    assert excerpt(source, ":start-after: // start\n:end-at: // end\n:lines: 2\n") == "// end"
