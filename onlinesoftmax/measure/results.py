"""Results with provenance: data/<gpu>/<date>-<suite>.json, and loading them back."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
from pathlib import Path

from onlinesoftmax.runtime.loader import REPO_ROOT
from onlinesoftmax.measure.timer import METHOD

DATA_DIR = REPO_ROOT / "data"          # measured suites only (<gpu>/<date>-<suite>.json)
LOGS_DIR = REPO_ROOT / "logs"          # what ran on a GPU: test tiers, chapters, sanitizers, probes (<gpu>/<date>-*.log)
# (registry name, dtype) -> the name its rows carry in files recorded before the dtypes of a kernel were
# one variant (data/h200/2026-11-29-logsumexp.json names the fp16 build of log_softmax apart).
RETIRED_NAMES = {("log_softmax_01_online", "float16"): "log_softmax_01_online_fp16"}
META_KEYS = ("gpu", "sm_count", "l2_bytes", "driver", "cuda_runtime", "cupy", "date",
             "git_commit", "method")


def git_commit() -> str:
    """The commit the run was made from: $ONLINESOFTMAX_GIT_COMMIT (device runs), else git."""
    commit = os.environ.get("ONLINESOFTMAX_GIT_COMMIT")
    if commit:
        return commit
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200'."""
    name = re.sub(r"^(nvidia|amd)\s+", "", name.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def host_slug(meta: dict) -> str:
    """The data folder of a result: 'h200' for one GPU, 'h200x2' for a run across two GPUs of one host."""
    count = int(meta.get("gpu_count", 1))
    return gpu_slug(meta["gpu"]) + (f"x{count}" if count > 1 else "")


def gpu_meta(method: str = METHOD, gpu_count: int = 1) -> dict:
    """Provenance of a measurement made now on the current GPU (`gpu_count` GPUs of this host took part)."""
    import cupy

    device = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(device.id)
    meta = {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "sm_count": device.attributes["MultiProcessorCount"],
        "l2_bytes": device.attributes["L2CacheSize"],
        "sm_clock_kHz": device.attributes.get("ClockRate"),
        "compute_capability": device.compute_capability,
        "driver": cupy.cuda.runtime.driverGetVersion(),
        "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
        "cupy": cupy.__version__,
        "numpy": __import__("numpy").__version__,
        "python": platform.python_version(),
        "date": _dt.date.today().isoformat(),
        "git_commit": git_commit(),
        "method": method,
    }
    if gpu_count > 1:
        meta["gpu_count"] = int(gpu_count)
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        pass
    except Exception as error:   # installed, but its import failed in this process: say why, once, in the record
        meta["torch"] = f"not loaded: {type(error).__name__}: {str(error).strip().splitlines()[0]}"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0:
            meta["driver_version"] = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return meta


def write_results(suite: str, rows: list[dict], meta: dict | None = None, folder: Path | None = None) -> Path:
    """Write {"meta", "rows"} to data/<gpu>/<date>-<suite>.json (data/<gpu>x<n>/ for n GPUs) and return the path."""
    meta = meta or gpu_meta()
    folder = folder or DATA_DIR / host_slug(meta)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{meta['date']}-{suite}.json"
    if "sources" not in meta:   # what was measured, so that a later change to it shows (freshness.py)
        from onlinesoftmax.measure.freshness import source_hashes

        meta = {**meta, "sources": source_hashes(rows)}
    path.write_text(json.dumps({"meta": {**meta, "suite": suite}, "rows": rows}, indent=1) + "\n")
    return path


def recorded_files(suite: str, gpu: str = "h200") -> list[Path]:
    return sorted((DATA_DIR / gpu).glob(f"*-{suite}.json"))


def load_recorded(suite: str, gpu: str = "h200", date: str | None = None) -> dict:
    """The newest recorded result of `suite` for `gpu`, or the one recorded on `date` ("2026-12-06")."""
    files = [f for f in recorded_files(suite, gpu) if date is None or f.name.startswith(f"{date}-")]
    if not files:
        raise FileNotFoundError(f"no recorded results for suite {suite!r} under {DATA_DIR / gpu}"
                                f"{f' recorded on {date}' if date else ''}")
    data = json.loads(files[-1].read_text())
    data["path"] = str(files[-1].relative_to(REPO_ROOT))
    return data


def provenance(meta: dict, live: bool = False) -> str:
    """One line for a figure: where the numbers came from."""
    what = "measured live" if live else "recorded"
    return (f"{what} on {meta['gpu']} ({meta['sm_count']} SMs), {meta['date']}, "
            f"cupy {meta['cupy']}, commit {str(meta['git_commit'])[:10]}")


def measure_or_load(suite: str, measure, gpu: str = "h200", live: bool = False) -> tuple[dict, bool]:
    """The recorded file, or, when `live` (a page's flag: a whole suite takes longer than a page should)
    and this machine has a GPU, a measurement now (`measure()` returns {"meta", "rows"}).

    Returns (data, live).
    """
    from onlinesoftmax.runtime.device import has_gpu

    if live and has_gpu():
        return measure(), True
    return load_recorded(suite, gpu), False
