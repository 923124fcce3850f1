// attention_10_wgmma — attention_07_fragment_reuse's loop on Hopper's warpgroup instruction: S = Q K^T
// and O += P V as wgmma.mma_async (kernels/common/wgmma.cuh), 64 rows by 128 keys (or by d) an
// instruction instead of mma.sync's 16 by 8, with Q, K and V read by the tensor cores straight from
// shared memory.
//
// Changed from attention_07_fragment_reuse:
//   - Two warpgroups of 4 warps (256 threads) for the block's 128 query rows: warpgroup w owns rows
//               64w .. 64w + 63, warp i of it 16 of them, as the instruction's accumulators lay
//               them out (the same per-warp fragments as mma.sync, so the softmax is unchanged).
//   - S = Q K^T: d / 16 instructions of m64 n128 k16, Q and K from shared memory through
//               descriptors; no ldmatrix, no B fragments in registers.
//   - O += P V: 8 instructions of m64 n(d) k16 with P from registers (the score accumulators,
//               rounded and paired, are the A fragments) and V from shared memory, read MN-major.
//   - Key tiles of 128 (the registers hold s of 128 keys, 64 floats, beside o, 64 at d = 128).
//   - K, V and Q are stored in wgmma's layout: blocks of 64 columns, each [rows][64] with the
//               16-byte chunks XOR-swizzled by the row (the instruction's 128-byte swizzle),
//               1024-byte aligned; each thread fences its cp.async writes into the async proxy
//               before the barrier that precedes the instructions.
//   - Each product is waited for before its result is used (wgmma_wait<0>): no overlap of the
//               softmax of one tile with the products of the next yet.
//   - A warpgroup skips a key tile none of its 64 rows sees (attention_07: a warp, 32 rows).
// Launch:       grid = (ceil(n_q / 128), heads, batch), longest causal query tiles first;
//               block = 256 threads (2 warpgroups x 64 query rows); dynamic shared memory the Q
//               tile of 128 x D and two stages of one K and one V tile (128 keys x D), 16-bit
//               elements, and 1 KiB to align them: 81 KiB at D = 64, 161 KiB at D = 128.
// Traffic:      as attention_07: q and out once; each K and V tile once per query tile of 128.
// Limits:       float16 or bfloat16, D = 64 or 128 (entries attention_10_wgmma_<f16|bf16>_d<64|128>),
//               contiguous 16-byte aligned inputs, any n_q, n_k >= 1, GQA, bottom-right causal, any
//               finite scale. Compute capability 9.0 (H100, H200: the sm_90a build); elsewhere it traps.
#include "wgmma_attention.cuh"

// Block (x, head, batch) of [batch][heads][n][D] tensors; x counts down so the longest causal
// query tiles start first.
template <class T, int D>
__device__ __forceinline__ void attention_10(const typename T::Elem* __restrict__ q, const typename T::Elem* __restrict__ k,
                                             const typename T::Elem* __restrict__ v, typename T::Elem* __restrict__ out,
                                             float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,
                                             float scale_log2, int causal) {
    const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (heads / kv_heads);
    const long long q_rows = (long long)(batch * heads + head) * n_q, kv_rows = (long long)(batch * kv_heads + kv_head) * n_k;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * WG_BLOCK_Q;
    extern __shared__ unsigned char shared_raw[];
    float o[D / 8][4], m[2], l[2];
    wgmma_forward<T, D>(q + q_rows * D, k + kv_rows * D, v + kv_rows * D, n_q, n_k, q0, scale_log2, causal,
                        aligned_shared(shared_raw), o, m, l);
    store_output<T, D>(o, m, l, out + q_rows * D, lse == nullptr ? nullptr : lse + q_rows, q0 + 16 * (threadIdx.x >> 5), n_q);
}

#define ATTENTION_10(TAG, T, D)                                                                             \
    extern "C" __global__ void __launch_bounds__(WG_THREADS, 1) attention_10_wgmma_##TAG##_d##D(              \
        const T::Elem* __restrict__ q, const T::Elem* __restrict__ k, const T::Elem* __restrict__ v,          \
        T::Elem* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,        \
        float scale_log2, int causal) {                                                                     \
        attention_10<T, D>(q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal);                 \
    }

ATTENTION_10(bf16, Bf16Mma, 64)
ATTENTION_10(bf16, Bf16Mma, 128)
ATTENTION_10(f16, F16Mma, 64)
ATTENTION_10(f16, F16Mma, 128)
