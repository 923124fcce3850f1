"""The judge of an attention kernel's outputs against the float64 reference: the rule shared by the
attention kernels whose layouts differ (paged decode, packed sequences)."""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks


def compare_outputs(y, lse, ref, lse_ref, model, dtype: str, by_lse_row=lambda a: a) -> tuple[bool, str]:
    """(passed, message) for a kernel's out `y` and `lse` (host arrays) against the float64 `ref` and
    `lse_ref`, with `model` the kernel's NumPy model's out: no NaN; zeros and an LSE of -inf where a
    query sees no key; the output within checks.tolerance of the model's own error (twice it plus two
    ulps); the LSE within 1e-5 relative. `by_lse_row(y)` arranges the outputs' rows as the LSE's (for
    layouts where they differ, such as packed sequences)."""
    y, model = checks.as_float64(y), checks.as_float64(model)
    if y.shape != ref.shape or lse.shape != lse_ref.shape:
        return False, f"shapes: out {y.shape}, lse {lse.shape}; expected {ref.shape} and {lse_ref.shape}"
    blind = ~np.isfinite(lse_ref)
    if np.isnan(y).any() or np.isnan(lse).any():
        return False, f"NaN in {int(np.isnan(y).sum())} outputs and {int(np.isnan(lse).sum())} LSEs"
    if not ((by_lse_row(y)[blind] == 0).all() and np.isneginf(lse[blind]).all()):
        return False, "a query that sees no key did not give zeros and an LSE of -inf"
    model_err = float(np.abs(model - ref).max(initial=0))
    err, allowed = float(np.abs(y - ref).max(initial=0)), checks.tolerance(model_err, ref, dtype)
    if err > allowed:
        return False, f"output error {err:.3g} against float64, allowed {allowed:.3g} (the model's {model_err:.3g})"
    lse_err = float(np.abs(lse[~blind] - lse_ref[~blind]).max(initial=0))
    if lse_err > 1e-5 * max(1, float(np.abs(lse_ref[~blind]).max(initial=1))):
        return False, f"LSE error {lse_err:.3g}"
    return True, f"output error {err:.3g} (allowed {allowed:.3g}), LSE error {lse_err:.3g}"
