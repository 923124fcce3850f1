"""Sampling one token per row of logits, without a sort:

    tokens = onlinesoftmax.sample(logits)                                      # softmax(logits)
    tokens = onlinesoftmax.sample(logits, temperature=0.7, top_p=0.9, generator=1234)
    tokens = onlinesoftmax.sample(logits, top_k=50, min_p=torch.full((batch,), 0.05), generator=g)

logits (..., V) float32, float16 or bfloat16 (float64: sampled from the float64 distribution); one
int64 token per row, of shape logits.shape[:-1]. The row is sampled from the softmax of
logits / temperature restricted to the tokens that top-k keeps, then top-p of those (the nucleus of
the top-k distribution), then min-p (tokens whose probability is at least min_p times the largest);
tokens tied with a threshold are kept. temperature below 1e-5 is greedy (the first largest logit).
Each parameter is a number for every row or an array of one value per row (numpy, cupy or torch,
on the logits' device, of shape logits.shape[:-1] or flat); top_k None or <= 0 (or >= V), top_p None
or 1, min_p None or 0 switch a filter off. The filters are applied as FlashInfer's "top-k first":
top-p measures its mass within the tokens top-k keeps (vLLM's current sampler applies min-p first).
A row with a NaN or +inf logit, with no finite logit, or whose logits / temperature overflow float32
gets token -1: never a silent token.

generator: None (fresh randomness), an int seed (the same tokens for the same seed and inputs), a
numpy Generator, or a torch Generator (its seed and offset: the same generator state gives the same
tokens; a CUDA generator's seed and offset are read and its offset advanced on the host, so such a
call cannot be captured in a CUDA graph). Tokens depend only on the seed, the offset, the row's place
in the batch and the token's place, never on the launch or the number of threads (every sum in the
kernel is exact): the same logits at another row of a batch draw other noise.

NumPy arrays run the kernels' NumPy model, CuPy arrays a kernel, torch tensors on torch's current
stream. variant: "auto" (the kernel split.choose picks for the shape and filters), "rows" (sampling_01_rows, a
block per row) or "split" (sampling_02_split, a row's chunks over blocks): both draw the same tokens. Per-row arrays are checked on the host (one synchronization each, on the
GPU).
"""
from __future__ import annotations

import secrets

import numpy as np

from onlinesoftmax.inputs import check_array, check_length, describe, resolve
from onlinesoftmax.kernels.sampling import rows as ksampling
from onlinesoftmax.kernels.sampling import split as ksplit
from onlinesoftmax.reference import array_module
from onlinesoftmax.runtime import torch_bridge
from onlinesoftmax.runtime.plan import get_runner

TORCH_KEY_SALT = 0x9E3779B97F4A7C15   # XORed into a torch generator's seed: another Philox key than torch's
RANGES = {"temperature": (0.0, np.inf, "a finite number >= 0"), "top_k": (None, None, "an int (<= 0: off)"),
          "top_p": (0.0, 1.0, "a number in (0, 1]"), "min_p": (0.0, 1.0, "a number in [0, 1]")}


def sample(logits, *, temperature=1.0, top_k=None, top_p=None, min_p=None, generator=None, variant="auto"):
    """One token per row of `logits` (see the module doc)."""
    params = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
    if torch_bridge.is_tensor(logits) or any(torch_bridge.is_tensor(v) for v in params.values()):
        arrays = [n for n, v in params.items() if hasattr(v, "shape") and not np.isscalar(v) and
                  torch_bridge.is_tensor(v) != torch_bridge.is_tensor(logits)]
        if arrays:
            raise TypeError(f"sample: a per-row parameter must be an array of the logits' kind; got {arrays} of "
                            f"another kind than {describe(logits)}")
        seed, offset = seed_and_offset(generator)
        detached = {name: v.detach() if torch_bridge.is_tensor(v) else v for name, v in params.items()}
        logits = logits.detach() if torch_bridge.is_tensor(logits) else logits   # tokens carry no gradient
        return torch_bridge.call(sample, logits, generator=_Drawn((seed, offset)), variant=variant, **detached)
    on_gpu = check_array(logits, "sample", exact=True)
    chosen = None if variant == "auto" else resolve(variant, "sampling", "sample")
    if logits.shape[-1] == 0:
        raise ValueError(f"sample: the logits need at least one token on their last axis, got shape "
                         f"{tuple(logits.shape)}")
    check_length(logits, logits.ndim - 1, "sample")
    x = logits.reshape(-1, logits.shape[-1])
    if chosen is not None and chosen.name == "sampling_02_split" and x.shape[0] > ksplit.MAX_ROWS:
        raise ValueError(f"sample: variant {variant!r} takes at most {ksplit.MAX_ROWS} rows (its grid holds them on "
                         f"y), got {x.shape[0]}; variant='rows' or 'auto' takes any number")
    values = {name: checked(name, value, x.shape[0], logits) for name, value in params.items()}   # one per row
    seed, offset = seed_and_offset(generator)
    xp = array_module(logits)
    if x.shape[0] == 0:
        return xp.empty(logits.shape[:-1], np.int64)
    if logits.dtype == np.float64:   # from the float64 distribution, the kernel's noise
        tokens = exact_tokens(xp.asnumpy(x) if on_gpu else x, seed, offset, values)
        return xp.asarray(tokens).reshape(logits.shape[:-1])
    if not on_gpu:
        return ksampling.simulate(x, seed, offset, **values).reshape(logits.shape[:-1])
    x = x if x.strides[-1] == x.itemsize else xp.ascontiguousarray(x)
    tokens = xp.empty(x.shape[0], np.int64)
    arrays = {name: v for name, v in values.items() if not np.isscalar(v)}
    launches = ksplit.passes(values["top_k"], values["top_p"], values["min_p"], values["temperature"], x.shape[1])
    selects = ksplit.PASS_BINS in launches   # (a per-row array: assumed used)
    chosen = chosen or ksplit.choose(x.shape[0], x.shape[1], selects=selects).variant
    runner = get_runner(chosen, x, tokens, {name: arrays.get(name) for name in values})
    runner(x, tokens, seed=seed, offset=offset, **values)
    return tokens.reshape(logits.shape[:-1])


def checked(name: str, value, n_rows: int, logits):
    """A parameter as the kernel takes it: a Python number, or an array of n_rows on the logits'
    side (float32; int32 for top_k), its values checked."""
    off = ksampling.OFF[name]
    if value is None:
        return off
    low, high, accepted = RANGES[name]
    if np.isscalar(value) and not isinstance(value, (str, bytes)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or (name == "top_k" and not isinstance(value, (int, np.integer))):
            raise TypeError(f"sample: {name} must be {accepted} or an array of one per row, got {value!r}")
        array = np.asarray([value])
    else:
        rows_shape = tuple(logits.shape[:-1])
        if type(value) is not type(logits) or tuple(value.shape) not in ((n_rows,), (1,), (), rows_shape):
            shapes = f"{rows_shape}" if rows_shape == (n_rows,) else f"{rows_shape} or ({n_rows},)"
            error = ValueError if hasattr(value, "shape") else TypeError   # (a str or a list: not an array at all)
            raise error(f"sample: {name} must be a number or an array of the logits' kind with one value per "
                        f"row (shape {shapes}), got {describe(value)}")
        if (value.dtype.kind not in "iu") if name == "top_k" else (value.dtype.kind != "f"):
            raise TypeError(f"sample: {name} must be {'integers' if name == 'top_k' else 'floats'}, got {value.dtype}")
        array = value.reshape(-1)
    if name != "top_k":
        bad = (array != array) | (array < low) | (array > high) | (abs(array) == np.inf) | \
            ((array <= 0) if name == "top_p" else False)
        if bool(bad.any()):   # one synchronization for a device array
            where = int(array_module(array).argmax(bad))
            raise ValueError(f"sample: {name} must be {accepted}, got {float(array[where])}"
                             + (f" (row {where})" if array.size > 1 else ""))
    if np.isscalar(value):   # top_k clipped to the kernel's int: anything from n on means "off"
        return int(min(max(int(value), -1), 2**31 - 1)) if name == "top_k" else float(value)
    dtype = np.int32 if name == "top_k" else np.float32
    if name == "top_k":
        array = array_module(array).clip(array, -1, 2**31 - 1)
    return array_module(array).ascontiguousarray(array.astype(dtype, copy=False)) if array.size == n_rows else \
        (int(array[0]) if name == "top_k" else float(array[0]))


class _Drawn(tuple):
    """(seed, offset) drawn from a torch Generator, passed on to the call on arrays (not a caller's tuple)."""
    seed = property(lambda self: self[0])
    offset = property(lambda self: self[1])


def seed_and_offset(generator) -> tuple[int, int]:
    """(seed, offset) of the Philox noise from what the caller passed as generator."""
    if generator is None:
        return secrets.randbits(64), 0
    if isinstance(generator, _Drawn):   # already drawn (the torch path)
        return generator.seed, generator.offset
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, (bool, np.bool_)):
        return int(generator) & (2**64 - 1), 0
    if isinstance(generator, np.random.Generator):
        return int(generator.integers(0, 2**63)), 0
    if type(generator).__name__ == "Generator" and type(generator).__module__.startswith("torch"):
        return torch_seed_and_offset(generator)
    raise TypeError(f"sample: generator must be None, an int seed, a numpy or a torch Generator, got {generator!r}")


def torch_seed_and_offset(generator) -> tuple[int, int]:
    """A CUDA generator: its seed and its Philox offset, then the offset advanced by four (one draw of
    four words per token, as torch's kernels count); a CPU generator: a seed drawn from it."""
    import torch

    if generator.device.type == "cuda":   # the key salted: never the words torch's own kernels draw
        offset = generator.get_offset()
        generator.set_offset(offset + 4)
        return generator.initial_seed() ^ TORCH_KEY_SALT, offset
    return int(torch.randint(0, 2**62, (1,), generator=generator)), 0


def exact_tokens(x, seed, offset, values) -> np.ndarray:
    """float64 logits: the token whose Gumbel key over the float64 distribution is largest."""
    from onlinesoftmax.kernels.sampling import philox

    host = {name: (v.get() if hasattr(v, "get") else v) for name, v in values.items()}
    p = ksampling.distribution(x, **host)
    g = philox.gumbel(x.shape[0], x.shape[1], seed, offset).astype(np.float64)
    with np.errstate(divide="ignore"):
        keys = np.log(p) + g
    tokens = np.argmax(np.where(np.isnan(keys), -np.inf, keys), axis=1).astype(np.int64)
    return np.where(np.isnan(p).any(axis=1), -1, tokens)
