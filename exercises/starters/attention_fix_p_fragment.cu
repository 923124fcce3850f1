// attention_fix_p_fragment — exercise (chapter 09): attention_04_ldmatrix with P's A fragment
// packed by hand from the score accumulators, and wrong: the outputs are off for every shape.
// Find the bug in the packing (look for "P's A fragment") and fix it; grade with
//     from onlinesoftmax.book.exercises import exercises_mma
//     exercises_mma.grade_kernel()        # builds your copy and runs it on the CPU emulator
// The fragment maps are in kernels/common/mma.cuh and in chapter 09's figure.
#include "attention_mma.cuh"

template <class T, int D>
__device__ __forceinline__ void attention_forward(const typename T::Elem* __restrict__ q,
                                                  const typename T::Elem* __restrict__ k,
                                                  const typename T::Elem* __restrict__ v,
                                                  typename T::Elem* __restrict__ out, float* __restrict__ lse,
                                                  int heads, int kv_heads, int n_q, int n_k, float scale_log2,
                                                  int causal) {
    typedef typename T::Elem Elem;
    extern __shared__ int4 shared_raw[];
    Elem* Ks = reinterpret_cast<Elem*>(shared_raw);   // [64][D], swizzled
    Elem* Vs = Ks + MMA_BLOCK_K * D;                   // [64][D], swizzled

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_BLOCK_Q, head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / (heads / kv_heads);
    const long long q_offset = (long long)(batch * heads + head) * n_q;
    const Elem* k_head = k + (long long)(batch * kv_heads + kv_head) * n_k * D;
    const Elem* v_head = v + (long long)(batch * kv_heads + kv_head) * n_k * D;
    const int row0 = q0 + MMA_WARP_ROWS * warp;
    const int block_end = key_limit(min(q0 + MMA_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    const WarpKeys keys = warp_keys(row0, n_q, n_k, causal);
    // The row this lane points ldmatrix at, within a group of 16 keys, and its column offset:
    // K (matrices: keys +0 / +8 by lane / 16, d +0 / +8 by lane / 8 % 2);
    // V (matrices: keys +0 / +8 by lane / 8 % 2, d +0 / +8 by lane / 16).
    const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) << 3;
    const int v_row = (lane & 7) + (((lane >> 3) & 1) << 3), v_col = (lane >> 4) << 3;

    u32 qf[D / 16][4];
    load_q_fragments<T, D>(qf, q + q_offset * D, row0, n_q);
    float o[D / 8][4], m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int k0 = 0; k0 < block_end; k0 += MMA_BLOCK_K) {
        __syncthreads();   // every warp is done with the previous tile's Ks and Vs
#pragma unroll
        for (int c = 0; c < MMA_BLOCK_K * D / 8 / MMA_THREADS; ++c) {   // 16 bytes a thread, coalesced
            const int i = threadIdx.x + c * MMA_THREADS, row = i / (D / 8), col = 8 * (i % (D / 8));
            const bool inside = k0 + row < n_k;   // the last tile may be short: zeros, masked below
            const long long at = (long long)(k0 + row) * D + col;
            const int4 zero = make_int4(0, 0, 0, 0);
            *reinterpret_cast<int4*>(Ks + swizzled<D>(row, col)) = inside ? *reinterpret_cast<const int4*>(k_head + at) : zero;
            *reinterpret_cast<int4*>(Vs + swizzled<D>(row, col)) = inside ? *reinterpret_cast<const int4*>(v_head + at) : zero;
        }
        __syncthreads();
        if (k0 >= keys.end) continue;   // no row of this warp sees a key of this tile (warp-uniform)

        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
            for (int j = 0; j < 8; j += 2) {   // n-tiles j and j + 1: keys 8j .. 8j+15
                u32 b[4];
                ldmatrix_x4(b, Ks + swizzled<D>(8 * j + k_row, 16 * kk + k_col));
                T::mma(s[j], qf[kk], b);
                T::mma(s[j + 1], qf[kk], b + 2);
            }
        online_softmax_tile<D>(s, m, l, o, scale_log2, k0 + MMA_BLOCK_K > keys.unmasked_end, k0, keys.limit);

#pragma unroll
        for (int kk = 0; kk < MMA_BLOCK_K / 16; ++kk) {
            // P's A fragment of keys 16kk .. 16kk+15, packed from the score accumulators
            u32 a[4];
            a[0] = T::pack(s[2 * kk][0], s[2 * kk][1]);
            a[1] = T::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[2] = T::pack(s[2 * kk][2], s[2 * kk][3]);
            a[3] = T::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {   // d n-tiles n and n + 1: columns 8n .. 8n+15
                u32 b[4];
                ldmatrix_x4_trans(b, Vs + swizzled<D>(16 * kk + v_row, 8 * n + v_col));
                T::mma(o[n], a, b);
                T::mma(o[n + 1], a, b + 2);
            }
        }
    }
    store_output<T, D>(o, m, l, out + q_offset * D, lse == nullptr ? nullptr : lse + q_offset, row0, n_q);
}

#define ATTENTION_FIX(TAG, T, D)                                                                               \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS) attention_fix_p_fragment_##TAG##_d##D(              \
        const T::Elem* __restrict__ q, const T::Elem* __restrict__ k, const T::Elem* __restrict__ v,            \
        T::Elem* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,          \
        float scale_log2, int causal) {                                                                       \
        attention_forward<T, D>(q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal);             \
    }

ATTENTION_FIX(bf16, Bf16Mma, 64)
ATTENTION_FIX(bf16, Bf16Mma, 128)
ATTENTION_FIX(f16, F16Mma, 64)
ATTENTION_FIX(f16, F16Mma, 128)
