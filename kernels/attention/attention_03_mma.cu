// attention_03_mma — the FlashAttention-2 forward on tensor cores: S = Q K^T and O += P V as
// mma.sync.m16n8k16 (bf16 or fp16 in, fp32 accumulate), the online softmax on the accumulators.
//
// Changed from attention_01_blocked: the two products run on tensor cores instead of fp32 FMAs.
//               Each warp owns 16 query rows; their Q fragments stay in registers for the whole
//               loop, the 16 x 64 scores of a key tile are mma accumulators, the softmax works on
//               them where they are (a row lives in the 4 lanes of a quad: two shuffles per max),
//               and P becomes the A operand of P V without leaving the registers (rounded to the
//               input dtype; the sums l stay fp32). Scores in base 2 (scale * log2 e applied to
//               the fp32 accumulators), one division by l at the end, LSE in fp32.
//               K and V tiles go through shared memory with plain 16-byte stores and are read
//               back with 32-bit (K) and 16-bit (V) loads: rows of 2D bytes put the 8 key rows a
//               K fragment load touches in the same banks (8-way conflicts; the next step fixes it).
// Launch:       grid = (ceil(n_q / 128), heads, batch), the longest causal query tiles first;
//               block = 256 threads (8 warps x 16 query rows). Dynamic shared memory: one K and
//               one V tile of 64 x D 16-bit elements (16 KiB at D = 64, 32 KiB at D = 128).
// Traffic:      q and out once; each K and V tile once per query tile of 128 rows (n_q / 128
//               times in all, from L2 when they fit). FLOPs: 4 n_q n_k D per head (about half
//               with causal: key tiles past a warp's last visible key are skipped).
// Limits:       q, k, v contiguous (batch, heads, seq, D) / (batch, kv_heads, seq, D), 16-byte
//               aligned, float16 or bfloat16 (entries attention_03_mma_<f16|bf16>_d<64|128>);
//               heads a multiple of kv_heads; any n_q, n_k >= 1 (K/V rows past n_k load as zeros
//               and their scores are masked to -inf). Causal is aligned bottom-right: query i sees
//               keys j < i + 1 + n_k - n_q; a query that sees no key writes 0 and LSE -inf.
//               Compute capability 8.0 or newer (mma.sync with bf16).
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
    Elem* Ks = reinterpret_cast<Elem*>(shared_raw);   // [64][D], row-major as in global memory
    Elem* Vs = Ks + MMA_BLOCK_K * D;                   // [64][D]

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_BLOCK_Q, head = blockIdx.y, batch = blockIdx.z;
    const int kv_head = head / (heads / kv_heads);
    const long long q_offset = (long long)(batch * heads + head) * n_q;
    const Elem* k_head = k + (long long)(batch * kv_heads + kv_head) * n_k * D;
    const Elem* v_head = v + (long long)(batch * kv_heads + kv_head) * n_k * D;
    const int row0 = q0 + MMA_WARP_ROWS * warp;
    const int block_end = key_limit(min(q0 + MMA_BLOCK_Q, n_q) - 1, n_q, n_k, causal);
    const WarpKeys keys = warp_keys(row0, n_q, n_k, causal);

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
            *reinterpret_cast<int4*>(Ks + row * D + col) = inside ? *reinterpret_cast<const int4*>(k_head + at) : zero;
            *reinterpret_cast<int4*>(Vs + row * D + col) = inside ? *reinterpret_cast<const int4*>(v_head + at) : zero;
        }
        __syncthreads();
        if (k0 >= keys.end) continue;   // no row of this warp sees a key of this tile (warp-uniform)

        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
            for (int j = 0; j < 8; ++j) {   // B = K^T: column g of n-tile j is key 8j + g, k runs along d
                const Elem* key = Ks + (8 * j + g) * D + 16 * kk + 2 * t;
                const u32 b[2] = {*reinterpret_cast<const u32*>(key), *reinterpret_cast<const u32*>(key + 8)};
                T::mma(s[j], qf[kk], b);
            }
        online_softmax_tile<D>(s, m, l, o, scale_log2, k0 + MMA_BLOCK_K > keys.unmasked_end, k0, keys.limit);

#pragma unroll
        for (int kk = 0; kk < MMA_BLOCK_K / 16; ++kk) {
            u32 a[4];
            p_fragment<T>(a, s, kk);
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {   // B = V: k is the key, column g is d = 8n + g
                const Elem* value = Vs + (16 * kk + 2 * t) * D + 8 * n + g;
                const u32 b[2] = {pack_pair(value[0], value[D]), pack_pair(value[8 * D], value[9 * D])};
                T::mma(o[n], a, b);
            }
        }
    }
    store_output<T, D>(o, m, l, out + q_offset * D, lse == nullptr ? nullptr : lse + q_offset, row0, n_q);
}

#define ATTENTION_03(TAG, T, D)                                                                               \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS) attention_03_mma_##TAG##_d##D(                   \
        const T::Elem* __restrict__ q, const T::Elem* __restrict__ k, const T::Elem* __restrict__ v,            \
        T::Elem* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q, int n_k,          \
        float scale_log2, int causal) {                                                                       \
        attention_forward<T, D>(q, k, v, out, lse, heads, kv_heads, n_q, n_k, scale_log2, causal);             \
    }

ATTENTION_03(bf16, Bf16Mma, 64)
ATTENTION_03(bf16, Bf16Mma, 128)
ATTENTION_03(f16, F16Mma, 64)
ATTENTION_03(f16, F16Mma, 128)
