"""The attention kernel exercise's task (kernel_tasks.py has the others): fp32, d = 64, its cases, its
check against the float64 reference and its timed launch."""
from __future__ import annotations

import numpy as np

from onlinesoftmax import checks
from onlinesoftmax.book.exercises.grading import Tolerance
from onlinesoftmax.book.exercises.kernel_tasks import Check, host


def score_rounding_floor(q, k, v, o_ref):
    """(heads, n_q): twice the output error that the float32 rounding of the scores alone causes. A
    score s_j = scale q.k_j summed in float32 errs by about delta_j = 2 eps scale sum_i |q_i k_ji|
    (plus eps |s_j| when it is scaled to base 2), and d o / d s_j = p_j (v_j - o): the output moves
    by about sqrt(sum_j (p_j |v_j - o| delta_j)^2) (independent roundings). Where a row is one-hot this
    is ~0 (no weight can move); where two top scores of order 1e3 nearly tie it is ~1e-4, more than
    the NumPy model's own error happens to be there, which bounds no other summation order."""
    d = q.shape[-1]
    scale = 1 / np.sqrt(d)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = np.einsum("hqd,hkd->hqk", q64, k64) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    eps = checks.EPS["float32"]
    delta = 2 * eps * scale * np.einsum("hqd,hkd->hqk", np.abs(q64), np.abs(k64)) + eps * np.abs(s)
    spread = np.abs(v64[:, None, :, :] - o_ref[:, :, None, :]).max(axis=-1)     # max over d of |v_j - o|
    return 2 * np.sqrt(((p * spread * delta) ** 2).sum(axis=-1))


# ---- attention, fp32, d = 64 ------------------------------------------------------------------

class Attention:
    """kernel(q, k, v, o, lse, n_q, n_k, scale) for q (heads, n_q, 64), k and v (heads, n_k, 64);
    grid (ceil(n_q / 128), heads), block 128. Not timed: it is about correctness."""
    block = 128
    d = 64
    timed_shape = None
    shapes = (("one query, one key", 1, 1, 1, 1.0), ("2 heads, 2 queries, 31 keys", 2, 2, 31, 1.0),
              ("31 queries, 33 keys", 1, 31, 33, 1.0), ("2 heads, 33 queries, 64 keys (two whole tiles)", 2, 33, 64, 1.0),
              ("100 queries, 257 keys", 1, 100, 257, 1.0), ("129 queries (two blocks), 100 keys", 1, 129, 100, 1.0),
              ("3 queries, 4097 keys", 1, 3, 4097, 1.0), ("large logits: q scaled by 8, 40 queries, 300 keys", 1, 40, 300, 8.0))

    def entries(self, name):
        return (name,)

    def cases(self, seed: int = 0, small: bool = False):
        """The chapter's shapes, then hidden ones drawn from `seed`: keys that are no multiple of the
        tile, scores of order 1e4 (a kernel without the running maximum overflows there)."""
        rng = np.random.default_rng(seed)
        n_k = int(rng.integers(34, 200 if small else 700))
        n_k += n_k % 32 == 0
        # small (the CPU emulator, which runs every thread one after another): the long row of 4097 keys
        # becomes 1025 (33 tiles, the last partial; 4097 took three quarters of an emulated grading)
        shapes = tuple((label.replace("4097", "1025"), heads, n_q, 1025, s) if small and keys > 1025 else
                       (label, heads, n_q, keys, s) for label, heads, n_q, keys, s in self.shapes)
        shapes += ((f"hidden case: 5 queries, {n_k} keys, scores of order 1e4", 1, 5, n_k, 1e4),
                                (f"hidden case: 2 heads, 3 queries, {n_k} keys, scores of order 1e3", 2, 3, n_k, 1e3))
        found = []
        for number, (label, heads, n_q, n_k, q_scale) in enumerate(shapes):
            rng = np.random.default_rng(100 + number + (seed if label.startswith("hidden") else 0))
            q = (rng.standard_normal((heads, n_q, self.d)) * q_scale).astype(np.float32)
            k, v = (rng.standard_normal((heads, n_k, self.d)).astype(np.float32) for _ in range(2))
            found.append((label, {"q": q, "k": k, "v": v}))
        rng = np.random.default_rng(99)
        q = np.full((1, 7, self.d), -30.0, np.float32) + rng.standard_normal((1, 7, self.d)).astype(np.float32)
        k = (4.0 + 0.1 * rng.standard_normal((1, 45, self.d))).astype(np.float32)
        found.append(("every score near -1000 (below e^s's float32 range)", {"q": q, "k": k,
                      "v": rng.standard_normal((1, 45, self.d)).astype(np.float32)}))
        return found

    def run(self, backend, name, case, arena):
        from onlinesoftmax.kernels.attention import blocked as ab

        q_host, k_host, v_host = case["q"], case["k"], case["v"]
        heads, n_q, d = q_host.shape
        n_k = k_host.shape[1]
        q, k, v = (arena.input(a) for a in (q_host, k_host, v_host))
        o = arena.output("o", (heads, n_q, d), np.float32, checks.POISON["float32"])
        lse = arena.output("lse", (heads, n_q), np.float32, checks.POISON["float32"])
        backend.launch(name, (-(-n_q // self.block), heads), (self.block,),
                       (q, k, v, o, lse, np.int32(n_q), np.int32(n_k), np.float32(1 / np.sqrt(d))))
        backend.sync()
        o_ref, lse_ref = (a[0] for a in ab.reference(q_host[None], k_host[None], v_host[None]))
        o_base, lse_base = (a[0].astype(np.float64) for a in ab.simulate(q_host[None], k_host[None], v_host[None]))
        o_floor = score_rounding_floor(q_host, k_host, v_host, o_ref)
        o_rule = Tolerance(0.0, np.maximum(checks.tolerance(float(np.abs(o_base - o_ref).max()), o_ref, np.float32),
                                           o_floor.reshape(heads * n_q, 1)))
        lse_rule = Tolerance(0.0, 2 * float(np.abs(lse_base - lse_ref).max())
                             + 4 * checks.EPS["float32"] * max(1.0, float(np.abs(lse_ref).max())))
        queries = q_host.reshape(heads * n_q, d)
        return [Check("o", host(o).reshape(heads * n_q, d), o_ref.reshape(heads * n_q, d), o_rule, queries,
                      "its query row", checks.POISON["float32"]),
                Check("lse", host(lse).reshape(-1), lse_ref.reshape(-1), lse_rule, queries, "its query row",
                      checks.POISON["float32"])]

    def racecheck_case(self):
        """A small case for compute-sanitizer: 100 queries, 257 keys (nine tiles, the last partial)."""
        return next((label, c) for label, c in self.cases() if label.startswith("100 queries"))
