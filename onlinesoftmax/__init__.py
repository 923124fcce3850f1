"""Online softmax: the book's kernels, their NumPy models, references and timer."""
from . import kernels_softmax  # noqa: F401  (registers the teaching softmax kernels)
from . import kernels_masked  # noqa: F401  (softmax_03_online_masked)
from . import kernels_fp16  # noqa: F401  (softmax_04/05 fp16 with vector loads)
from . import kernels_monoid  # noqa: F401  (softmax_06_split_merge)
from . import kernels_logsumexp  # noqa: F401  (logsumexp_01_online, log_softmax_01_online)
from . import kernels_fast  # noqa: F401  (softmax_07..11: fp32/fp16/bf16, read once)
from . import reference
from .api import log_softmax, logsumexp, softmax
from .registry import REGISTRY, variants

VARIANTS = tuple(v.name for v in variants("softmax"))

__all__ = ["softmax", "logsumexp", "log_softmax", "reference", "REGISTRY", "VARIANTS", "variants"]
