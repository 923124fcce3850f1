// attention_08_paged_decode — decoding against a paged KV cache of sequences of different lengths:
// the keys of a sequence live in fixed-size pages anywhere in one pool, found through a page table,
// so a server appends a token by writing one slot of one page and never copies a cache.
//
// Changed from attention_06_decode_mma: only where a key is and how the keys are split. Key j of
//               sequence b and kv head h is row (page_table[b][j / page_size] * page_size +
//               j % page_size) * kv_heads + h of the pool [pages][page_size][kv_heads][D] (the
//               layout of flash-attention's and vLLM's paged caches); any page size. Sequence b
//               has cache_lengths[b] keys, read on the device: the launch, the plan and the
//               number of splits do not depend on the lengths, so a decode loop whose caches
//               grow by a token a step reuses one plan. The keys are shared out on the device,
//               in proportion to each sequence's length: every block first sums the batch's
//               lengths, T, and a split takes share = max(min_keys, ceil(T / (base_splits *
//               batch))) keys, the batch's keys over base_splits splits a sequence on average
//               (base_splits: the plan's count that fills the GPU's waves). Sequence b uses
//               min(gridDim.x, ceil(length / share)) splits, each a multiple of 32 keys, the
//               last taking the rest, so a long sequence gets more splits than a short one and
//               every block about the same keys (the grid holds several times base_splits for
//               the longest); the splits past those write the merge's identity. Rounding up
//               adds up to a split a sequence: when the plan's blocks fit one wave, the share
//               grows until the splits fit the wave (most_splits, from the host). A warp's step
//               of 16 keys reads its page's number once when the page size is a multiple of
//               16. The products, the online softmax, the finish and the merge are
//               attention_06's (decode_mma.cuh).
// Launch:       split: grid = (splits, kv_heads * ceil(rows / 8), batch), block = (128), static
//               shared memory 4 x 8 x (D + 2) floats; rows = heads / kv_heads * n_q. merge: as
//               attention_02's (grid = (batch * heads * n_q), block = (D), programmatic on sm_90).
// Traffic:      each sequence's K and V once + the page table + q and out; partials 4 (D + 1) B
//               per row and split, written and read back by the merge (none with one split).
// Limits:       q contiguous [batch][heads][n_q][D], the pools contiguous and 16-byte aligned,
//               float16 or bfloat16 (entries attention_08_paged_decode_<f16|bf16>_d<64|128> and
//               attention_08_paged_decode_merge_...); page_table int32 [batch][pages_per_seq] of
//               page numbers in [0, pages), cache_lengths int32 [batch], each in
//               [0, pages_per_seq * page_size] (the host checks both); heads a multiple of
//               kv_heads; causal bottom-right aligned to each sequence's length. A query that sees
//               no key (a sequence of length 0) writes 0 and LSE -inf. Compute capability 8.0.
#include "decode_mma.cuh"

// The splits a sequence of n keys takes at `share` keys a split: one per share keys, at least one,
// no more than the grid's.
__device__ __forceinline__ int splits_of(int n, int share) {
    return max(1, min((int)gridDim.x, (n + share - 1) / share));
}

// Sequence b's keys as the kernel reads them: its length, or none when the length is outside
// [0, capacity] (that sequence's rows then read NaN: PagedCache::valid).
__device__ __forceinline__ int keys_of(const int* __restrict__ lengths, int b, int capacity) {
    const int n = lengths[b];
    return n >= 0 && n <= capacity ? n : 0;
}

// The splits the whole batch takes at `share` keys a split, on every lane of warp 0.
__device__ __forceinline__ int batch_splits(const int* __restrict__ lengths, int capacity, int share) {
    int count = 0;
    for (int b = threadIdx.x; b < (int)gridDim.z; b += 32) count += splits_of(keys_of(lengths, b, capacity), share);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) count += __shfl_xor_sync(0xffffffffu, count, offset);
    return count;
}

// The keys a split takes (see the header): at least min_keys and the batch's keys T over
// base_splits x batch splits; when the plan's blocks fit one wave (most_splits > 0, the (sequence,
// split) pairs that wave holds), the smallest such share at which the sequences take at most
// most_splits splits together, so that rounding each sequence's splits up never spills blocks into
// a second wave. Warp 0 sums the lengths, then bisects (the count falls as the share grows, and a
// share of T / (most_splits - batch) keys always fits: each sequence rounds up by less than one
// split). A block whose split has no keys even at the smallest share skips the search.
__device__ __forceinline__ int split_share(const int* __restrict__ lengths, int capacity, int min_keys,
                                          int base_splits, int most_splits) {
    __shared__ int share;
    if (threadIdx.x < 32) {
        const int batch = gridDim.z;
        long long total = 0;
        int longest = 0;
        for (int b = threadIdx.x; b < batch; b += 32) {
            const int n = keys_of(lengths, b, capacity);
            total += n;
            longest = max(longest, n);
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            total += __shfl_xor_sync(0xffffffffu, total, offset);
            longest = max(longest, __shfl_xor_sync(0xffffffffu, longest, offset));
        }
        const long long splits = (long long)base_splits * batch;
        int lo = (int)max((long long)min_keys, (total + splits - 1) / splits);
        if (most_splits > 0 && (int)blockIdx.x < splits_of(keys_of(lengths, blockIdx.z, capacity), lo) &&
            batch_splits(lengths, capacity, lo) > most_splits) {
            const long long spare = (long long)most_splits - batch;   // splits left once each has rounded up
            int hi = max(lo, spare > 0 ? (int)((total + spare - 1) / spare) : longest);
            while (lo < hi) {
                const int mid = lo + (hi - lo) / 2;
                if (batch_splits(lengths, capacity, mid) <= most_splits) hi = mid; else lo = mid + 1;
            }
        }
        if (threadIdx.x == 0) share = lo;
    }
    __syncthreads();
    return share;
}

// The keys of the sequences of a batch in pages of one pool. Nothing is read outside the pool or
// the table whatever the lengths and page numbers: a length outside [0, pages_per_seq x page_size]
// reads no key, a page number outside [0, pages) reads page 0, and either marks the lookup `bad`,
// which turns the block's rows to NaN (the host's check, when the caller keeps it, has already
// raised an error for both).
template <int D>
struct PagedCache {
    const unsigned short* __restrict__ k_pages;
    const unsigned short* __restrict__ v_pages;
    const int* __restrict__ page_table;
    const int* __restrict__ lengths;
    int pages, pages_per_seq, page_size, kv_heads, share;   // share: the keys a split takes (see the header)

    __device__ __forceinline__ int capacity() const { return pages_per_seq * page_size; }
    __device__ __forceinline__ bool valid(int batch) const {
        return lengths[batch] >= 0 && lengths[batch] <= capacity();
    }
    __device__ __forceinline__ int length(int batch) const { return keys_of(lengths, batch, capacity()); }
    __device__ __forceinline__ long long offset(int batch, int kv_head, int key, bool& bad) const {
        long long page = page_table[(long long)batch * pages_per_seq + key / page_size];
        if (page < 0 || page >= pages) { bad = true; page = 0; }
        return ((page * page_size + key % page_size) * kv_heads + kv_head) * D;
    }
    // A warp's step of 16 keys from j0 (a multiple of 16) lies in one page when the page size is a
    // multiple of 16: one page-table read for the step, `at` the offset of key j0 and key j0 + i
    // kv_heads x D elements further per i. Other page sizes (at = -1) find each key alone.
    __device__ __forceinline__ long long step(int batch, int kv_head, int j0, bool& bad) const {
        return page_size % 16 == 0 ? offset(batch, kv_head, j0, bad) : -1;
    }
    __device__ __forceinline__ long long row(int batch, int kv_head, int key, int j0, long long at, bool& bad) const {
        return at >= 0 ? at + (long long)(key - j0) * kv_heads * D : offset(batch, kv_head, key, bad);
    }
    __device__ __forceinline__ const unsigned short* k_row(int batch, int kv_head, int key, int j0, long long at,
                                                           bool& bad) const {
        return k_pages + row(batch, kv_head, key, j0, at, bad);
    }
    __device__ __forceinline__ const unsigned short* v_row(int batch, int kv_head, int key, int j0, long long at,
                                                           bool& bad) const {
        return v_pages + row(batch, kv_head, key, j0, at, bad);
    }
    // Split s of this sequence's keys: its own count of splits, one per `share` keys (no more than the
    // grid has), each a multiple of 32 keys, the last taking the rest.
    __device__ __forceinline__ void range(int batch, int split, int& begin, int& end) const {
        const int n = length(batch);
        const int splits = splits_of(n, share);
        const int per = 32 * (((n + splits - 1) / splits + 31) / 32);
        begin = split < splits ? split * per : n;
        end = min(n, begin + per);
    }
};

#define ATTENTION_08(TAG, T, D)                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * DECODE_MMA_WARPS, 3) attention_08_paged_decode_##TAG##_d##D( \
        const unsigned short* __restrict__ q, const unsigned short* __restrict__ k_pages,                    \
        const unsigned short* __restrict__ v_pages, const int* __restrict__ page_table,                      \
        const int* __restrict__ cache_lengths, float* __restrict__ o_part, float* __restrict__ lse_part,     \
        unsigned short* __restrict__ out, float* __restrict__ lse, int heads, int kv_heads, int n_q,         \
        int pages, int pages_per_seq, int page_size, int min_keys, int base_splits, int most_splits,          \
        float scale_log2, int causal) {                                                                       \
        const PagedCache<D> cache = {k_pages, v_pages, page_table, cache_lengths, pages, pages_per_seq,     \
                                     page_size, kv_heads,                                                     \
                                     split_share(cache_lengths, pages_per_seq * page_size, min_keys,          \
                                                 base_splits, most_splits)};                                  \
        decode_mma_cache<T, D>(q, cache, o_part, lse_part, out, lse, heads, kv_heads, n_q, scale_log2, causal); \
    }                                                                                                         \
    extern "C" __global__ void attention_08_paged_decode_merge_##TAG##_d##D(                                  \
        const float* __restrict__ o_part, const float* __restrict__ lse_part, unsigned short* __restrict__ out, \
        float* __restrict__ lse, int splits) {                                                                \
        decode_merge<MmaOut<T>, D>(o_part, lse_part, out, lse, splits);                                       \
    }

ATTENTION_08(bf16, Bf16Mma, 64)
ATTENTION_08(bf16, Bf16Mma, 128)
ATTENTION_08(f16, F16Mma, 64)
ATTENTION_08(f16, F16Mma, 128)
