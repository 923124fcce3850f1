import cupy as cp, traceback
import onlinesoftmax as osm
from onlinesoftmax import api, kernels_fast as kf, checks_fast as cf
for rows in (3, 7, 8, 10, 64, 1024):
    x = cf.random_rows(cp, rows, 1 << 20, "float32", seed=1)
    plan = kf.plan_10(rows, 1 << 20, "float32", 4)
    shared = plan.cache_elems * 4
    res = kf.max_active_clusters("softmax_12_pipelined_f32_v4", plan.threads, shared, plan.n_chunks, "softmax/softmax_12_pipelined.cu")
    try:
        y = api.run(osm.REGISTRY["softmax_12_pipelined"], x); cp.cuda.Device().synchronize(); ok = cf.compare(y, x)[0]
    except Exception as e:
        ok = f"{type(e).__name__}: {e}"
    print("12 rows", rows, plan, "resident clusters", res, "->", ok, flush=True)
