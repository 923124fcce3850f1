// attention_09_varlen — prefill of a batch of sequences of different lengths packed one after
// another (no padding), the layout of flash-attention's varlen forward: a server's prompts of
// 7, 900 and 31 tokens are 938 rows, not 3 x 900.
//
// Changed from attention_07_fragment_reuse: only where a (sequence, head)'s rows are. Sequence b
//               owns query rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q [tokens][heads][D]
//               and key rows cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1 of k and v
//               [tokens][kv_heads][D]: a head's rows are heads x D elements apart (kv_heads x D for
//               K and V), and a tile copy is still 16 bytes a thread, 8 threads a row at D = 64.
//               The grid covers the longest sequence; a block past its own sequence's end returns
//               before its first copy. Key tiles of 32 keys at D = 128 (48 in attention_07): the
//               lengths and strides read from cu_seqlens take registers attention_07 reads from
//               its parameters, and with 48 keys two of them would spill. The products, the
//               online softmax and the epilogue are attention_07's (fragment_reuse.cuh).
// Launch:       grid = (ceil(max_seqlen_q / 128), heads, batch), longest causal query tiles first;
//               block = 128 threads; dynamic shared memory the Q tile of 128 x D and two stages
//               of a K and a V tile: 48 KiB at D = 64, 64 KiB at D = 128.
// Traffic:      as attention_07: q and out once; each sequence's K and V tiles once per query tile
//               of 128 of that sequence; cu_seqlens 4 integers a block.
// Limits:       float16 or bfloat16, D = 64 or 128 (entries attention_09_varlen_<f16|bf16>_d<64|128>);
//               q, k, v, out contiguous and 16-byte aligned; cu_seqlens_q and cu_seqlens_k int32
//               [batch + 1], non-decreasing from 0 to the token counts (the host checks them); lse
//               float32 [heads][total_q] or null; GQA; causal aligned bottom-right to each
//               sequence (query i of n_q sees keys j <= i + n_k - n_q); a query that sees no key
//               (an empty key sequence, or causal with n_q > n_k) writes 0 and LSE -inf. Compute
//               capability 8.0 or newer.
#define REUSE_KEYS_D128 32   // key tiles of 32 at D = 128: the lengths held in registers leave no room for 48
#include "fragment_reuse.cuh"

template <class T, int D>
__device__ __forceinline__ void attention_09(const typename T::Elem* __restrict__ q, const typename T::Elem* __restrict__ k,
                                             const typename T::Elem* __restrict__ v, typename T::Elem* __restrict__ out,
                                             float* __restrict__ lse, const int* __restrict__ cu_seqlens_q,
                                             const int* __restrict__ cu_seqlens_k, int heads, int kv_heads,
                                             int total_q, float scale_log2, int causal) {
    const int head = blockIdx.y, batch = blockIdx.z, kv_head = head / (heads / kv_heads);
    const int q_start = cu_seqlens_q[batch], k_start = cu_seqlens_k[batch];
    const int n_q = cu_seqlens_q[batch + 1] - q_start, n_k = cu_seqlens_k[batch + 1] - k_start;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * MMA_BLOCK_Q;
    if (q0 >= n_q) return;   // past this sequence's queries: nothing to do (block-uniform, before any barrier)
    const long long q_at = ((long long)q_start * heads + head) * D, kv_at = ((long long)k_start * kv_heads + kv_head) * D;
    const HeadRows<typename T::Elem> rows{q + q_at, k + kv_at, v + kv_at, heads * D, kv_heads * D, n_q, n_k};
    extern __shared__ int4 shared_raw[];
    WarpRows<D> state;
    fragment_reuse_forward<T, D, REUSE_KEYS(D)>(rows, q0, scale_log2, causal, shared_raw, state);
    const int q_first = cu_seqlens_q[batch];   // read again: nothing about the outputs is kept through the loop
    store_rows<T, D>(state, out + ((long long)q_first * heads + head) * D,
                     lse == nullptr ? nullptr : lse + (long long)head * total_q + q_first, heads * D, q0, n_q);
}

#define ATTENTION_09(TAG, T, D)                                                                                    \
    extern "C" __global__ void __launch_bounds__(REUSE_THREADS, 2) attention_09_varlen_##TAG##_d##D(                 \
        const T::Elem* __restrict__ q, const T::Elem* __restrict__ k, const T::Elem* __restrict__ v,                 \
        T::Elem* __restrict__ out, float* __restrict__ lse, const int* __restrict__ cu_seqlens_q,                    \
        const int* __restrict__ cu_seqlens_k, int heads, int kv_heads, int total_q, float scale_log2, int causal) {  \
        attention_09<T, D>(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, heads, kv_heads, total_q, scale_log2,      \
                           causal);                                                                                \
    }

ATTENTION_09(bf16, Bf16Mma, 64)
ATTENTION_09(bf16, Bf16Mma, 128)
ATTENTION_09(f16, F16Mma, 64)
ATTENTION_09(f16, F16Mma, 128)
