// attention_07_fragment_reuse — attention_05_pipelined with fewer instructions per mma: each warp
// owns 32 query rows (two m-tiles of 16), so every K or V fragment read from shared memory feeds
// two mmas instead of one, and the softmax spends fewer instructions per score.
//
// Changed from attention_05_pipelined:
//   - 4 warps of 32 rows instead of 8 warps of 16, for the same 128 query rows a block. One
//               ldmatrix.x4 of K or V feeds four mmas (two n-tiles times two m-tiles), not two.
//   - Q waits in shared memory (swizzled like K), read as A fragments by ldmatrix per 16 columns:
//               two m-tiles of Q in registers would need 64 more registers than there are.
//   - Key tiles of 64 keys at D = 64 but 48 at D = 128, where o (128 registers), the scores of
//               64 keys (64) and the fragments would spill. Per 192 mmas at D = 128 (one tile):
//               64 ldmatrix (16 of Q, 24 of K, 24 of V), against 96 in attention_05.
//   - The scale is applied as the exponent is taken: p = 2^(s scale log2 e - m), m kept in scaled
//               units and the row max taken on the raw scores (for scale <= 0 the scores are
//               scaled first, as before); the product is rounded before m is subtracted
//               (__fmul_rn, never contracted into an fma), so the row's maximum gives 2^0 = 1
//               exactly: fma(s, scale log2 e, -m) would leave the rounding of m, |m| 2^-24, in
//               the exponent, hundreds for scores near 1e10. The exponential is one
//               ex2.approx.ftz (exp2f adds a compare and two multiplies to keep subnormal results).
//   - O is rescaled only when some row of the warp has a new max (alpha != 1): late in a long
//               row the max rarely moves, and multiplying by 1 changes no bit.
//   - Fragment addresses: the swizzled chunk of 16-column step kk is step 0's XOR 2kk, so an
//               address is one XOR and a constant offset, not a multiply-add per step.
//   - Tile copies: a thread's rows in a tile are 8 or 16 apart, so its copies are one address
//               plus constants; only a last, short tile computes each row's zero fill.
//   Registers (ptxas, sm_90a): 255 at D = 128, 221 at D = 64, no spill; two blocks of 128
//               threads fit in an SM: 8 warps as before, in two blocks whose barriers do not
//               line up.
// Launch:       grid = (ceil(n_q / 128), heads, batch), longest causal query tiles first;
//               block = 128 threads (4 warps x 32 query rows); dynamic shared memory the Q tile
//               of 128 x D and two stages of one K and one V tile (keys x D), 16-bit elements:
//               48 KiB at D = 64, 80 KiB at D = 128 (the launcher raises the limit).
// Traffic:      as attention_03_mma: q and out once; each K and V tile once per query tile of 128.
// Limits:       as attention_05_pipelined: float16 or bfloat16, D = 64 or 128 (entries
//               attention_07_fragment_reuse_<f16|bf16>_d<64|128>), contiguous 16-byte aligned
//               inputs, any n_q, n_k >= 1, GQA, bottom-right causal, any finite scale. Compute
//               capability 8.0 or newer.
#include "fragment_reuse.cuh"

// Block (x, head, batch) of [batch][heads][n][D] tensors; x counts down so the longest causal
// query tiles start first.
template <class T, int D>
__device__ __forceinline__ void attention_07(const typename T::Elem* __restrict__ q, const typename T::Elem* __restrict__ k,
                                             const typename T::Elem* __restrict__ v, typename T::Elem* __restrict__ out,
                                             float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,
                                             float scale_log2, int causal) {
    const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (heads / kv_heads);
    const long long q_rows = (long long)(batch * heads + head) * n_q, kv_rows = (long long)(batch * kv_heads + kv_head) * n_k;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_BLOCK_Q;
    const HeadRows<typename T::Elem> rows{q + q_rows * D, k + kv_rows * D, v + kv_rows * D, D, D, n_q, n_k};
    extern __shared__ int4 shared_raw[];
    WarpRows<D> state;
    fragment_reuse_forward<T, D, REUSE_KEYS(D)>(rows, q0, scale_log2, causal, shared_raw, state);
    store_rows<T, D>(state, out + q_rows * D, lse == nullptr ? nullptr : lse + q_rows, D, q0, n_q);
}

#define ATTENTION_07(TAG, T, D)                                                                               \
    extern "C" __global__ void __launch_bounds__(REUSE_THREADS, 2) attention_07_fragment_reuse_##TAG##_d##D(   \
        const T::Elem* __restrict__ q, const T::Elem* __restrict__ k, const T::Elem* __restrict__ v,            \
        T::Elem* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,          \
        float scale_log2, int causal) {                                                                       \
        attention_07<T, D>(q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal);                   \
    }

ATTENTION_07(bf16, Bf16Mma, 64)
ATTENTION_07(bf16, Bf16Mma, 128)
ATTENTION_07(f16, F16Mma, 64)
ATTENTION_07(f16, F16Mma, 128)
