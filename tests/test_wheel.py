"""CPU tier: the package as a user installs it. The wheel (pip wheel .) carries the CUDA sources as
package data; installed into a fresh virtual environment outside the repository, without CuPy, it
imports, finds its kernels in site-packages and runs every public function on the NumPy models."""
import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from onlinesoftmax.runtime.loader import REPO_ROOT

SMOKE = textwrap.dedent('''
    import importlib.util, pathlib, sys
    import numpy as np
    assert importlib.util.find_spec("cupy") is None, "this environment must not have CuPy"
    import onlinesoftmax as osm
    from onlinesoftmax import reference
    from onlinesoftmax.runtime import loader
    installed = pathlib.Path(osm.__file__).resolve().parent
    assert "site-packages" in str(installed), installed
    assert loader.KERNELS_DIR == installed / "_kernels", loader.KERNELS_DIR
    for variant in osm.REGISTRY.values():
        path = loader.KERNELS_DIR / variant.file
        assert path.is_file(), path
        text, _ = loader.expand_source(path)          # every #include found in the installed tree
        assert "#include" not in text.replace("#include <", "")
    x = np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32)
    np.testing.assert_allclose(osm.softmax(x), reference.softmax(x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(osm.logsumexp(x), reference.logsumexp(x), rtol=1e-5)
    probs, columns = osm.softmax_topk(x, 5)
    assert (columns == np.argsort(-x, axis=1)[:, :5]).all()
    q = np.random.default_rng(1).standard_normal((1, 2, 5, 64)).astype(np.float32)
    assert osm.attention(q, q, q, causal=True).shape == q.shape
    print("smoke ok", len(osm.REGISTRY), "kernels")
''')


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(REPO_ROOT)], capture_output=True, text=True, timeout=600,
                          cwd=out)
    assert done.returncode == 0, done.stderr
    found = sorted(out.glob("onlinesoftmax-*.whl"))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_carries_every_kernel_source(wheel):
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(REPO_ROOT / "kernels")) for p in (REPO_ROOT / "kernels").rglob("*")
               if p.suffix in (".cu", ".cuh", ".h")}
    missing = sorted(s for s in sources if f"onlinesoftmax/_kernels/{s}" not in names)
    assert sources and not missing, f"sources the wheel leaves out: {missing}"


def test_installed_outside_the_repository_without_cupy_it_runs_the_models(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # NumPy and ml_dtypes from this environment (offline), nothing else: no CuPy, no torch
    shared = tmp_path / "shared"
    shared.mkdir()
    import ml_dtypes
    import numpy

    for module in (numpy, ml_dtypes):
        source = Path(module.__file__).parent
        (shared / source.name).symlink_to(source)
        for meta in source.parent.glob(f"{source.name}-*.dist-info"):
            (shared / meta.name).symlink_to(meta)
    for libs in Path(numpy.__file__).parent.parent.glob("numpy.libs"):
        (shared / libs.name).symlink_to(libs)
    site = next((env_dir / "lib").glob("python3*/site-packages"))
    (site / "shared.pth").write_text(str(shared) + "\n")
    done = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(python), "-c", SMOKE], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=clean)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "smoke ok" in done.stdout
