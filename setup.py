"""The package's layout for setuptools (the rest is in pyproject.toml): onlinesoftmax and its rooms, and
the repository's kernels/ carried as the package data onlinesoftmax/_kernels/ (runtime/loader.py finds
the CUDA in either place: a source checkout or an installed wheel)."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["onlinesoftmax", "onlinesoftmax.*"]) + ["onlinesoftmax._kernels"],
      package_dir={"onlinesoftmax._kernels": "kernels"},
      package_data={"onlinesoftmax._kernels": ["*/*.cu", "*/*.cuh", "*/*.h"]})
