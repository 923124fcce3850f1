// softmax_topk_01_online — the k largest probabilities of each row and their indices, with the
// row's normalizer, in one read of the logits (the online fused kernel of Milakov & Gimelshein).
//
// Changed from softmax_02_online: besides its state (m, l) each thread keeps a sorted list of the
//               K largest logits of its strided slice and their columns (K a compile-time
//               bucket >= k: 1, 4, 16 or 32; the list lives in registers, insertion unrolled).
//               The block then picks the row's k largest by k rounds of a block-wide argmax
//               over the threads' list heads (a warp butterfly, one candidate per warp through
//               shared memory, a butterfly in warp 0); the winner's thread pops its head. The
//               states combine as in softmax_02 (online_block_reduce). Thread 0 writes
//               p_i = e^(v_i - m) / l (or / the sum of the k kept, renormalize) and the columns.
//               Order: larger logit first; equal logits by the lower column; NaN ranks above
//               every number (as torch.topk), so a row holding NaN returns NaN probabilities
//               (the normalizer is NaN) at the NaN columns first.
// Launch:       grid = (n_rows), block = (256), static shared memory 32 states + 2 x 32
//               candidates (512 B).
// Traffic:      1 read per element + 12 B per kept (value, column) pair; the ideal is the read.
// Helpers:      the order, the register list (TopList) and warp_best are in common/top_list.cuh.
// Limits:       x float32, float16 or bfloat16 (entries _f32 / _f16 / _bf16 per K bucket:
//               softmax_topk_01_online_<tag>_k<K>); probabilities in x's dtype, columns int64;
//               1 <= k <= K <= 32, k <= n_cols; rows strided (unit column stride), scalar loads.
#include "online_rows.cuh"
#include "top_list.cuh"

// The candidate ahead of all others in the block (column -1: none left).
__device__ __forceinline__ Candidate block_best(Candidate c, Candidate* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    c = warp_best(c);
    if (lane == 0) scratch[warp] = c;
    __syncthreads();
    if (warp == 0) {
        c = warp_best(lane < n_warps ? scratch[lane] : Candidate{neg_inf(), -1});
        if (lane == 0) scratch[32] = c;
    }
    __syncthreads();
    const Candidate best = scratch[32];
    __syncthreads();   // scratch is reused by the next round
    return best;
}

template <class Row, int K>
__device__ __forceinline__ void softmax_topk_row(const typename Row::Elem* __restrict__ x,
                                                 typename Row::Elem* __restrict__ probs,
                                                 long long* __restrict__ columns, float* __restrict__ lse,
                                                 int n_cols, long long x_row_stride, int k, int renormalize) {
    __shared__ OnlineState states[32];
    __shared__ Candidate candidates[33];
    __shared__ float kept[K];
    __shared__ long long kept_column[K];
    const long long row = blockIdx.x;
    const typename Row::Elem* row_x = x + row * x_row_stride;

    OnlineState s = online_identity();
    TopList<K> list;
    list.clear();
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) {
        const float v = Row::load1(row_x + j);
        online_push(s, v);
        list.push(v, j);
    }
    const OnlineState stats = online_block_reduce(s, states);
    for (int round = 0; round < k; ++round) {
        const Candidate best = block_best({list.value[0], list.column[0]}, candidates);
        if (best.column == list.column[0] && list.holds(0)) list.pop();   // columns are unique
        if (threadIdx.x == 0) { kept[round] = best.value; kept_column[round] = best.column; }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        const float base = online_base(stats.m);
        float total = 0.0f;
        for (int i = 0; i < k; ++i) total += expf(kept[i] - base);
        const float scale = renormalize ? 1.0f / total : 1.0f / stats.l;
        for (int i = 0; i < k; ++i) {
            probs[row * k + i] = Row::from_float(expf(kept[i] - base) * scale);
            columns[row * k + i] = kept_column[i];
        }
        if (lse != nullptr) lse[row] = stats.m + logf(stats.l);
    }
}

#define SOFTMAX_TOPK_01(TAG, ROW, K)                                                                     \
    extern "C" __global__ void __launch_bounds__(256) softmax_topk_01_online_##TAG##_k##K(              \
        const ROW::Elem* __restrict__ x, ROW::Elem* __restrict__ probs, long long* __restrict__ columns, \
        float* __restrict__ lse, int n_cols, long long x_row_stride, int k, int renormalize) {          \
        softmax_topk_row<ROW, K>(x, probs, columns, lse, n_cols, x_row_stride, k, renormalize);         \
    }
#define SOFTMAX_TOPK_01_ALL_K(TAG, ROW) \
    SOFTMAX_TOPK_01(TAG, ROW, 1) SOFTMAX_TOPK_01(TAG, ROW, 4) SOFTMAX_TOPK_01(TAG, ROW, 16) SOFTMAX_TOPK_01(TAG, ROW, 32)

SOFTMAX_TOPK_01_ALL_K(f32, F32Row)
SOFTMAX_TOPK_01_ALL_K(f16, F16Row)
SOFTMAX_TOPK_01_ALL_K(bf16, BF16Row)
