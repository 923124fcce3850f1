// softmax_topk_06_split — fused softmax + top-k for few long rows (sampling: batch 1 to 256,
// vocabularies of 32K to 256K) and for k up to 1024: each row is split over C blocks, each block
// writes one packed record (m, l, its k best keys), and a second kernel merges a row's C records.
//
// Changed from softmax_topk_04_online_fused: one block per row leaves most SMs idle at batch 1
//               to 256, and a list per thread costs registers that grow with k. Here
//               softmax_topk_06_split_chunks gives block (row, c) the c-th chunk of T * 16
//               elements (the row's 16-byte vectors; chunk 0 also takes the scalar head and the
//               last chunk the scalar tail, as softmax_11_split): every thread loads its 16
//               elements into registers at once, the block finds its (m, l) over them (maximum,
//               then the sum: both from registers) and the k-th largest key among them by a
//               radix select (top_keys.cuh: eight-bit digits from the top, a shared histogram
//               per digit), and writes the record [(m, l), the keys >= that k-th key (in no
//               order), 0 for the missing ones when the chunk holds fewer than k].
//               softmax_topk_06_split_merge (a programmatic dependent launch: it starts while
//               the chunks run and waits for them in griddepcontrol.wait) gives each row a
//               block: the C states combine as chapter 04's split softmax, the C * k keys go to
//               shared memory, the same radix select finds the row's k-th key, the k keys at or
//               above it are sorted by rank, and the k probabilities, columns and LSE are
//               written. A record is the (m, l, list of k) state of its chunk, and the merge is
//               the combine of those states for C parts at once.
// Launch:       chunks: grid = (n_rows * C), block = (T), T a power of two in 64 .. 1024;
//               merge: grid = (n_rows), block = (T_m) in 64 .. 1024, dynamic shared memory
//               (C + 2) * k keys; records: n_rows * C * (k + 1) keys of 8 B.
// Traffic:      1 read per element + 8 (k + 1) B per chunk written and read again (from L2).
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_06_split_{chunks,merge}_<tag>);
//               1 <= k <= 1024, k <= n_cols < 2^31; C * k <= 16384 (the merge's keys in shared
//               memory; fewer where the GPU has less: the launcher's split rule keeps it); rows at
//               any start and stride; lse
//               may be null. sm_70 or newer; the early start of the merge needs sm_90 (below it
//               griddepcontrol compiles to nothing and the stream orders the two launches).
#include "launch_order.cuh"
#include "online_rows.cuh"
#include "top_keys.cuh"
#include "topk_build.cuh"

// The state (m, l) as one key-sized word: m in the low half, l in the high half.
__device__ __forceinline__ TopKey pack_state(OnlineState s) {
    return (static_cast<TopKey>(__float_as_uint(s.l)) << 32) | __float_as_uint(s.m);
}
__device__ __forceinline__ OnlineState unpack_state(TopKey word) {
    return {__uint_as_float(static_cast<unsigned int>(word)), __uint_as_float(static_cast<unsigned int>(word >> 32))};
}

// A thread's keys for the radix select (top_keys.cuh): its slots' keys at or above the chunk's
// floor (0: a missing slot) ...
template <int SLOTS>
struct SlotKeys {
    TopKey key[SLOTS];
    TopKey floor;
    template <class F>
    __device__ __forceinline__ void operator()(const F& f) const {
#pragma unroll
        for (int s = 0; s < SLOTS; ++s)
            if (key[s] != 0ull && key[s] >= floor) f(key[s]);
    }
};

// ... or the candidates i = t, t + T, ... of the merge in shared memory (0: a record's missing key).
struct SharedKeys {
    const TopKey* candidates;
    int n;
    template <class F>
    __device__ __forceinline__ void operator()(const F& f) const {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const TopKey key = candidates[i];
            if (key != 0ull) f(key);
        }
    }
};

template <class Row>
__device__ __forceinline__ void split_chunk(const typename Row::Elem* __restrict__ x, TopKey* __restrict__ records,
                                            int n_cols, long long x_row_stride, int n_chunks, int k) {
    constexpr int VEC = Row::VEC, PER_THREAD = Row::UNROLL, STEP = VEC * PER_THREAD, SLOTS = STEP + 2;
    __shared__ float scratch[32];
    __shared__ RadixScratch radix;
    __shared__ TopKey floor_word;
    dependents_may_launch();   // the merge's blocks may take free SM slots now (they wait for this grid)
    const int threads = blockDim.x, t = threadIdx.x;
    const long long row = blockIdx.x / n_chunks;
    const int chunk = static_cast<int>(blockIdx.x % n_chunks);
    const typename Row::Elem* row_x = x + row * x_row_stride;
    const RowSplit split = row_split<Row>(row_x, n_cols);
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row_x + split.head);
    const int chunk_first = chunk * threads * PER_THREAD;   // the chunk's first vector

    // slot s < STEP: element s % VEC of vector chunk_first + (s / VEC) * threads + t; slot STEP: head
    // element t (chunk 0); slot STEP + 1: tail element t (last chunk). Missing slots hold -inf.
    float v[SLOTS];
    unsigned int valid = 0u;
#pragma unroll
    for (int u = 0; u < PER_THREAD; ++u) {
        const int index = chunk_first + u * threads + t;
        if (index < split.n_vec) {
            Row::unpack(__ldg(vec + index), v + u * VEC);
            valid |= ((1u << VEC) - 1u) << (u * VEC);
        } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) v[u * VEC + e] = neg_inf();
        }
    }
    const bool has_head = chunk == 0 && t < split.head;
    const bool has_tail = chunk == n_chunks - 1 && t < n_cols - split.tail;
    v[STEP] = has_head ? Row::load1(row_x + t) : neg_inf();
    v[STEP + 1] = has_tail ? Row::load1(row_x + split.tail + t) : neg_inf();
    valid |= (has_head ? 1u << STEP : 0u) | (has_tail ? 1u << (STEP + 1) : 0u);

    if (t == 0) key_floor_reset(&floor_word, k);   // published by block_max's barriers
    float m = neg_inf();
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) m = fmaxf(m, v[s]);
    m = block_max(m, scratch);
    const float base = online_base(m);
    float l = 0.0f;   // in slot order (missing slots add e^-inf = 0)
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) l += exp2f((v[s] - base) * ONLINE_ROWS_LOG2E);

    SlotKeys<SLOTS> keys;   // the values are no longer needed: only their keys (0 for a missing slot)
    TopKey head = 0ull;
#pragma unroll
    for (int s = 0; s < SLOTS; ++s) {
        const int column = s < STEP ? split.head + (chunk_first + (s / VEC) * threads + t) * VEC + s % VEC
                                    : (s == STEP ? t : split.tail + t);
        keys.key[s] = ((valid >> s) & 1u) ? top_key(v[s], column) : 0ull;
        head = key_max(head, keys.key[s]);
    }
    key_floor_offer(head, k, &floor_word);
    l = block_sum(l, scratch);               // its barriers publish the floor
    keys.floor = floor_word;                 // the radix select counts only the keys at or above it
    const TopKey threshold = block_kth_key(keys, k, &radix);
    TopKey* record = records + (row * n_chunks + chunk) * (k + 1);
    block_gather_keys(keys, threshold, k, &radix, record + 1);
    for (int i = min(radix.count, k) + t; i < k; i += threads) record[1 + i] = 0ull;   // fewer than k here
    if (t == 0) record[0] = pack_state({m, l});
}

template <class Row>
__device__ __forceinline__ void split_merge(const TopKey* __restrict__ records, typename Row::Elem* __restrict__ probs,
                                            long long* __restrict__ columns, float* __restrict__ lse, int n_chunks,
                                            int k, int renormalize) {
    extern __shared__ TopKey pool[];   // n_chunks * k candidates, k chosen, k sorted
    __shared__ OnlineState states[32];
    __shared__ float sums[32];
    __shared__ RadixScratch radix;
    const int threads = blockDim.x, t = threadIdx.x;
    const long long row = blockIdx.x;
    const int n = n_chunks * k;
    TopKey* candidates = pool;
    TopKey* chosen = pool + n;
    TopKey* sorted = chosen + k;
    const TopKey* row_records = records + row * n_chunks * (k + 1);
    wait_for_prerequisite_grid();   // the chunks' grid has finished and its records are visible

    OnlineState s = online_identity();
    for (int c = t; c < n_chunks; c += threads) s = online_combine(s, unpack_state(row_records[c * (k + 1)]));
    for (int i = t; i < n; i += threads) candidates[i] = row_records[(i / k) * (k + 1) + 1 + i % k];
    const OnlineState whole = online_block_reduce(s, states);   // its barriers also publish the candidates

    const SharedKeys candidate_keys{candidates, n};
    const TopKey threshold = block_kth_key(candidate_keys, k, &radix);
    block_gather_keys(candidate_keys, threshold, k, &radix, chosen);
    block_rank_sort(chosen, k, sorted);
    __syncthreads();

    const float base = online_base(whole.m);
    float part = 0.0f;
    for (int i = t; i < k; i += threads) part += expf(key_value(sorted[i]) - base);
    const float scale = renormalize ? 1.0f / block_sum(part, sums) : 1.0f / whole.l;   // renormalize: the same in every thread
    for (int i = t; i < k; i += threads) {
        const TopKey key = sorted[i];
        probs[row * k + i] = Row::from_float(expf(key_value(key) - base) * scale);
        columns[row * k + i] = key_column(key);
    }
    if (t == 0 && lse != nullptr) lse[row] = whole.m + logf(whole.l);
}

#define SOFTMAX_TOPK_06(TAG, ROW)                                                                            \
    extern "C" __global__ void __launch_bounds__(1024) softmax_topk_06_split_chunks_##TAG(                  \
        const ROW::Elem* __restrict__ x, TopKey* __restrict__ records, int n_cols, long long x_row_stride,  \
        int n_chunks, int k) {                                                                               \
        if constexpr (topk_builds_row<ROW>()) split_chunk<ROW>(x, records, n_cols, x_row_stride, n_chunks, k); \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) softmax_topk_06_split_merge_##TAG(                   \
        const TopKey* __restrict__ records, ROW::Elem* __restrict__ probs, long long* __restrict__ columns, \
        float* __restrict__ lse, int n_chunks, int k, int renormalize) {                                     \
        if constexpr (topk_builds_row<ROW>()) split_merge<ROW>(records, probs, columns, lse, n_chunks, k, renormalize); \
    }

SOFTMAX_TOPK_06(f32, F32Row)
SOFTMAX_TOPK_06(f16, F16Row)
SOFTMAX_TOPK_06(bf16, BF16Row)
