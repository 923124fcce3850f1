#!/usr/bin/env bash
# The two-GPU round (a host with two GPUs): the distributed tests on one GPU and on two
# (NCCL, torchrun), then the multi-gpu benchmark under torchrun. What it records lands in
# data/h200x2/ (the benchmark) and data/h200/ (the test logs), packed into $OUT/multi-gpu.tar.gz.
#
#   bash scripts/multi_gpu_round.sh            # the suite multi-gpu
#   bash scripts/multi_gpu_round.sh --quick    # the suite multi-gpu-quick (about 40 s)
#
# Set ONLINESOFTMAX_GIT_COMMIT to the commit the tree was sent from.
set -u -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" data/h200 data/h200x2
day=$(date -u +%F)
status=0
pack() { tar czf "$OUT/multi-gpu.tar.gz" data/h200x2 data/h200/*distributed* 2>/dev/null; }

nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
nvidia-smi topo -m 2>/dev/null | head -5
python3 -c "import torch, cupy; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version(), 'cupy', cupy.__version__)"

log="logs/h200/$day-gpu-tests-distributed.log"
{ echo "# pytest -m gpu (one GPU and two, NCCL) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $(nvidia-smi -L | wc -l), $day, commit ${ONLINESOFTMAX_GIT_COMMIT:-unknown}"
  python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/gpu/test_distributed_gpu.py tests/gpu/test_distributed_nccl_gpu.py
} > "$log" 2>&1 || status=1
tail -3 "$log"; pack

timeout "${BENCH_TIMEOUT:-900}" python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
  onlinesoftmax/bench/multi_gpu.py "$@" 2>&1 | tee "$OUT/bench-multi-gpu.log" | tail -30 || status=1
pack
echo "== multi-gpu round done, status $status"
exit $status
