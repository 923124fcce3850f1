"""Online softmax: the book's kernels, their NumPy models, references and timer."""
from . import kernels_softmax  # noqa: F401  (registers the teaching softmax kernels)
from . import kernels_masked  # noqa: F401  (softmax_03_online_masked)
from . import kernels_fp16  # noqa: F401  (softmax_04/05 fp16 with vector loads)
from . import reference
from .api import softmax
from .registry import REGISTRY, variants

VARIANTS = tuple(v.name for v in variants("softmax"))

__all__ = ["softmax", "reference", "REGISTRY", "VARIANTS", "variants"]
