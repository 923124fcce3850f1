"""How deep a first call goes into the package: the longest chain of onlinesoftmax frames on the stack
during one call of each public function on a fresh process (numpy input on the CPU, cupy input on a GPU).

    python3 scripts/first_call_frames.py            # prints, per call, the depth and the deepest chain
"""
import os
import sys

import numpy as np

import onlinesoftmax as osm

PACKAGE = os.path.dirname(osm.__file__)


def deepest(call):
    best = [0, []]

    def profile(frame, event, arg):
        if event != "call":
            return
        chain, f = [], frame
        while f is not None:
            if f.f_code.co_filename.startswith(PACKAGE):
                chain.append(f"{os.path.relpath(f.f_code.co_filename, PACKAGE)}:{f.f_code.co_name}")
            f = f.f_back
        if len(chain) > best[0]:
            best[:] = [len(chain), chain[::-1]]

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return best


def main():
    try:
        import cupy as xp
        xp.zeros(1)
    except Exception:
        xp = np
    x = xp.asarray(np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32))
    for name, call in (("softmax", lambda: osm.softmax(x)), ("log_softmax", lambda: osm.log_softmax(x)),
                       ("logsumexp", lambda: osm.logsumexp(x)), ("softmax_topk", lambda: osm.softmax_topk(x, 5)),
                       ("softmax again", lambda: osm.softmax(x))):
        depth, chain = deepest(call)
        files = sorted({c.split(":")[0] for c in chain})
        print(f"{name} ({xp.__name__}): {depth} frames deep, {len(files)} files")
        print("   " + " > ".join(chain))


if __name__ == "__main__":
    main()
