"""The one registry of kernel variants.

Each kernel family's module in ``onlinesoftmax/kernels/`` declares its variants here
with `register`. Tests, benchmarks, widgets and chapters iterate `REGISTRY`, so a
variant cannot exist in one place and be missing in another.

Naming: a variant's name is its file stem (``softmax_02_online``). Its ``extern "C"``
entries are the stem itself or the stem followed by ``_`` and a build tag (dtype, vector
width, configuration: ``softmax_08_registers_f16_v8_n4_t256``). A second build of the same
file with preprocessor defines adds a suffix to the name (``softmax_02_online_unguarded``)
and keeps the file's entries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from onlinesoftmax.runtime.loader import KERNELS_DIR

# Column indices are 32-bit ints in the kernels; a thread's index plus one block-wide (or
# group-wide) step must stay below 2^31, so rows stop 2^16 columns short of it.
MAX_COLS = 2**31 - 2**16


# Build tags of the storage dtypes in entry names: <file stem>_<tag>[_...] (softmax_08_registers_f16_v8_n4_t256).
DTYPE_TAGS = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
DTYPES = tuple(DTYPE_TAGS)   # the storage dtypes the kernels take (math in float32)
DTYPE_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}   # bytes per element of each


@dataclass(frozen=True)
class Launch:
    """Launch geometry for one call: grid and block (x, y, z) and dynamic shared memory."""

    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_bytes: int = 0


@dataclass(frozen=True)
class Variant:
    name: str                 # registry key = file stem (+ suffix for a define build)
    family: str               # "softmax", "logsumexp", "log_softmax", ...
    file: str                 # path under kernels/
    story: str                # one line: what this variant changes
    geometry: Callable[[int, int], Launch]            # (n_rows, n_cols) -> Launch
    simulate: Callable[..., object]                   # NumPy model of the kernel
    plan: Callable[..., Callable]                     # (variant, x, y, **options) -> runner (runtime/plan.py)
    reads_per_element: int = 2                        # DRAM reads per element (model)
    writes_per_element: int = 1
    defines: tuple[str, ...] = ()
    entry: str = ""           # defaults to the file stem
    dtypes: tuple[str, ...] = ("float32",)
    max_cols: int = MAX_COLS
    features: frozenset = field(default_factory=frozenset)  # e.g. {"mask", "valid_lengths"}
    short: str = ""           # short alias accepted by the API ("online")
    # every extern "C" entry the launcher may call: a tuple, or a callable(variant) -> names;
    # empty means just `entry_name`. The compile test checks each against ptxas's report.
    entries: tuple[str, ...] | Callable[["Variant"], object] = ()
    # the compute capability the kernel needs (major * 10 + minor): 90 for clusters and
    # programmatic dependent launches; `auto` never picks a kernel the device cannot run
    min_cc: int = 70
    # the newest compute capability it runs on, for kernels of one arch's own instructions (sm_90a's
    # wgmma and setmaxnreg: 90); None: every capability from min_cc on
    max_cc: int | None = None
    # the dynamic shared memory one block takes at head dimension d, for a kernel that may need more
    # than a GPU lets a block opt in to (sm_86's 99 KiB); the API refuses it there before launching.
    # None: it fits on every GPU from min_cc on
    shared_bytes: Callable[[int], int] | None = None

    @property
    def path(self) -> Path:
        return KERNELS_DIR / self.file

    @property
    def entry_name(self) -> str:
        return self.entry or Path(self.file).stem

    @property
    def launched_entries(self) -> tuple[str, ...]:
        """Every entry the launcher may launch (`entries`, or just `entry_name`)."""
        names = self.entries(self) if callable(self.entries) else self.entries
        return tuple(names) or (self.entry_name,)

    def dtype_entry(self, dtype: str) -> str:
        """The entry `<file stem>_<tag>` of a kernel with one entry per dtype (a define build keeps its
        file's entries)."""
        if dtype not in self.dtypes:
            raise TypeError(f"{self.name} takes {', '.join(self.dtypes)}, got {dtype}")
        return f"{self.path.stem}_{DTYPE_TAGS[dtype]}"

    def bytes_moved(self, n_rows: int, n_cols: int, itemsize: int) -> int:
        """Bytes the access model says this variant moves through DRAM."""
        return (self.reads_per_element + self.writes_per_element) * n_rows * n_cols * itemsize

    def kernel(self, entry: str | None = None):
        """The compiled `cupy.RawKernel` of `entry` (default `entry_name`; GPU only)."""
        from onlinesoftmax.runtime.loader import get_kernel

        return get_kernel(self.path, entry or self.entry_name, self.defines)

    def resources(self, entry: str | None = None):
        """Registers / shared / local memory of `entry` (default `entry_name`): from the device when
        there is one, else nvcc."""
        from onlinesoftmax.runtime import device
        from onlinesoftmax.runtime.loader import resources_from_device, resources_from_nvcc

        if device.has_gpu():
            return resources_from_device(self.kernel(entry))
        return resources_from_nvcc(self.path, entry or self.entry_name, self.defines)


REGISTRY: dict[str, Variant] = {}
# Define builds that the book and its benchmarks compile but the API never runs (the teaching
# kernels' schedule before their accuracy fix, softmax_teaching.sequential_build): compiled by
# the CI compile check like the registered ones.
EXTRA_BUILDS: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    if variant.name in REGISTRY:
        raise ValueError(f"variant {variant.name!r} registered twice")
    if not variant.path.is_file():
        raise FileNotFoundError(f"variant {variant.name}: no kernel file {variant.path}")
    REGISTRY[variant.name] = variant
    return variant


def register_build(variant: Variant) -> Variant:
    """Record an unregistered define build for the compile check (see EXTRA_BUILDS)."""
    if variant.name in REGISTRY or variant.name in EXTRA_BUILDS:
        raise ValueError(f"build {variant.name!r} recorded twice")
    EXTRA_BUILDS[variant.name] = variant
    return variant


def variants(family: str | None = None) -> list[Variant]:
    """Registered variants in story order (sorted by name), optionally of one family."""
    return [v for k, v in sorted(REGISTRY.items()) if family is None or v.family == family]


def resolve(name: str, family: str) -> Variant:
    """A registry key or a short alias ("online") -> the Variant."""
    if name in REGISTRY and REGISTRY[name].family == family:
        return REGISTRY[name]
    matches = [v for v in variants(family) if v.short == name]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(sorted({v.name for v in variants(family)} | {v.short for v in variants(family) if v.short}))
    raise ValueError(f"unknown {family} variant {name!r}; known: {known}")


def dtype_entries(variant: Variant) -> tuple[str, ...]:
    """`Variant.entries` of a kernel with one entry per dtype."""
    return tuple(variant.dtype_entry(dtype) for dtype in variant.dtypes)


def compile_configurations():
    """(path, define flags, name) for every build the registry needs: the CI compile check."""
    for v in [*variants(), *EXTRA_BUILDS.values()]:
        yield v.path, tuple(f"-D{d}" for d in v.defines), v.name
