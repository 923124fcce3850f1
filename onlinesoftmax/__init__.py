"""Online softmax: the book's kernels, their NumPy models, references and timer."""
from . import kernels_softmax  # noqa: F401  (registers the teaching softmax kernels)
from . import reference
from .api import softmax
from .registry import REGISTRY, variants

VARIANTS = tuple(v.name for v in variants("softmax"))

__all__ = ["softmax", "reference", "REGISTRY", "VARIANTS", "variants"]
