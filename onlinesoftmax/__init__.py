"""Online softmax: the book's kernels, their NumPy models, references and timer."""
from onlinesoftmax.kernels import softmax_teaching  # noqa: F401  (registers the teaching softmax kernels)
from onlinesoftmax.kernels import softmax_masked  # noqa: F401  (softmax_03_online_masked)
from onlinesoftmax.kernels import softmax_fp16  # noqa: F401  (softmax_04/05 fp16 with vector loads)
from onlinesoftmax.kernels import softmax_split_merge  # noqa: F401  (softmax_06_split_merge)
from onlinesoftmax.kernels import logsumexp_online  # noqa: F401  (logsumexp_01_online, log_softmax_01_online)
from onlinesoftmax.kernels import softmax_fast  # noqa: F401  (softmax_07..11: fp32/fp16/bf16, read once)
from onlinesoftmax import reference
from onlinesoftmax.api import log_softmax, logsumexp, softmax
from onlinesoftmax.registry import REGISTRY, variants

VARIANTS = tuple(v.name for v in variants("softmax"))

__all__ = ["softmax", "logsumexp", "log_softmax", "reference", "REGISTRY", "VARIANTS", "variants"]
