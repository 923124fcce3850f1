// softmax_topk_06_split — fused softmax + top-k for few long rows (sampling: batch 1 to 256,
// vocabularies of 32K to 256K) and for k up to 1024: each row is split over C blocks, each block
// writes one packed record (m, l, its k best keys), and a second kernel merges a row's C records.
//
// Changed from softmax_topk_04_online_fused: one block per row leaves most SMs idle at batch 1
//               to 256, and a list per thread costs registers that grow with k. Here
//               softmax_topk_06_split_chunks gives block (row, c) the c-th chunk of the row: `subs`
//               steps of T * 16 elements (16-byte vectors, 16 elements per thread a step, the next
//               step's loaded while this one is processed; chunk 0 also takes the scalar head and
//               the last chunk the scalar tail, as softmax_11_split). Each thread folds its
//               elements into its online (m, l), and an element not below the chunk's floor value
//               is a candidate: its key (top_keys.cuh) is appended to a buffer in shared memory
//               (a warp-wide prefix count, one atomic per warp and step). The floor starts at the
//               warp's k-th largest lane maximum of its first step (k <= 32), or at the smallest
//               of the warps' ceil(k / warps)-th largest (larger k; -inf past 32 x warps). When the
//               buffer could not take another step, a radix select over it (top_keys.cuh: eight-bit
//               digits from the top, a shared histogram per digit) keeps its k best and its
//               threshold becomes the floor: later steps append few keys. At the chunk's end the
//               states combine (online_block_reduce) and the same select writes the record [(m, l),
//               the chunk's k best keys (in no order), 0 for the missing ones when it holds fewer].
//               softmax_topk_06_split_merge (a programmatic dependent launch: it starts while
//               the chunks run and waits for them in griddepcontrol.wait) gives each row a
//               block: the C states combine as chapter 04's split softmax, the C * k keys go to
//               shared memory, the same radix select finds the row's k-th key, the k keys at or
//               above it are sorted by rank, and the k probabilities, columns and LSE are
//               written. A record is the (m, l, list of k) state of its chunk, and the merge is
//               the combine of those states for C parts at once.
// Launch:       chunks: grid = (n_rows * C), block = (T = 256), dynamic shared memory
//               (capacity + k) keys, capacity = k + 2 * T * 18 (a step appends at most 18 keys a
//               thread: 16 elements, the head and the tail); merge: grid = (n_rows), block = (T_m)
//               in 64 .. 1024, dynamic shared memory (C + 2) * k keys; records: n_rows * C * (k + 1)
//               keys of 8 B. The split rule: softmax_topk_split.split_shape.
// Traffic:      1 read per element + 8 (k + 1) B per chunk written and read again (from L2).
// Limits:       x float32, float16 or bfloat16 (entries softmax_topk_06_split_{chunks,merge}_<tag>);
//               1 <= k <= 1024, k <= n_cols < 2^31; C * k <= 16384 (the merge's keys in shared
//               memory; fewer where the GPU has less: the launcher's split rule keeps it); T <= 256;
//               rows at any start and stride; lse may be null. sm_70 or newer; the early start of
//               the merge needs sm_90 (below it griddepcontrol compiles to nothing and the stream
//               orders the two launches). A row whose k-th key is NaN (k NaNs) makes every element a
//               candidate: correct, and slow.
#include "launch_order.cuh"
#include "topk_rows.cuh"

// The state (m, l) as one key-sized word: m in the low half, l in the high half.
__device__ __forceinline__ TopKey pack_state(OnlineState s) {
    return (static_cast<TopKey>(__float_as_uint(s.l)) << 32) | __float_as_uint(s.m);
}
__device__ __forceinline__ OnlineState unpack_state(TopKey word) {
    return {__uint_as_float(static_cast<unsigned int>(word)), __uint_as_float(static_cast<unsigned int>(word >> 32))};
}

// The candidates buffer[0 .. n) in shared memory as the radix select's keys (top_keys.cuh): thread
// t holds i = t, t + T, ... (0: a record's missing key, in the merge).
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

// Chunk `chunk` of a row: steps [chunk * subs, (chunk + 1) * subs) of T * UNROLL vectors each
// (thread t takes vectors base + u * T + t), with the row's scalar head in the first step of chunk
// 0 and its scalar tail in the last step of the last chunk (thread t: element t of each).
template <class Row>
__device__ __forceinline__ void split_chunk(const typename Row::Elem* __restrict__ x, TopKey* __restrict__ records,
                                            int n_cols, long long x_row_stride, int n_chunks, int subs, int k,
                                            int capacity) {
    constexpr int VEC = Row::VEC, UNROLL = Row::UNROLL, STEP = VEC * UNROLL;
    extern __shared__ TopKey buffer[];   // `capacity` candidates, then k chosen ones
    __shared__ OnlineState states[32];
    __shared__ RadixScratch radix;
    __shared__ int appended[3];          // candidates appended by step i: appended[i % 3]
    __shared__ TopKey floor_key;         // the chunk's floor: the last selection's threshold
    dependents_may_launch();   // the merge's blocks may take free SM slots now (they wait for this grid)
    const int threads = blockDim.x, t = threadIdx.x, lane = t & 31;
    const long long row = blockIdx.x / n_chunks;
    const int chunk = static_cast<int>(blockIdx.x % n_chunks);
    const typename Row::Elem* row_x = x + row * x_row_stride;
    const RowSplit split = row_split<Row>(row_x, n_cols);
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row_x + split.head);
    const int sub_vectors = threads * UNROLL;
    const int first = chunk * subs * sub_vectors + t;   // this thread's first vector of the chunk
    const int n_steps = max(1, min(subs, (split.n_vec - chunk * subs * sub_vectors + sub_vectors - 1) / sub_vectors));
    const int room = threads * (STEP + 2);               // the most candidates one step can append
    if (t < 3) appended[t] = 0;
    if (t == 0) floor_key = ~0ull;   // the first step's block floor is a minimum (k > 32)
    __syncthreads();

    OnlineState s = online_identity();
    float thr_value = neg_inf();   // the floor's value: a value below it is never a candidate
    int held = 0;                  // candidates in buffer[0 .. held) before this step's (block-uniform)
    typename Row::Vec raw[UNROLL];
    load_step<Row>(vec, first, split.n_vec, threads, raw);
    for (int step = 0; step < n_steps; ++step) {
        // Slots: STEP vector elements (past the row's vectors: -inf), then the head element (the
        // chunk's first step in chunk 0) and the tail element (its last step in the last chunk).
        const int base_vector = first + step * sub_vectors;
        float v[STEP];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            if (base_vector + u * threads < split.n_vec) {
                Row::unpack(raw[u], v + u * VEC);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[u * VEC + e] = neg_inf();
            }
        }
        if (step + 1 < n_steps) load_step<Row>(vec, base_vector + sub_vectors, split.n_vec, threads, raw);
        const bool has_head = chunk == 0 && step == 0 && t < split.head;
        const bool has_tail = chunk == n_chunks - 1 && step == n_steps - 1 && t < n_cols - split.tail;
        const float head_value = has_head ? Row::load1(row_x + t) : neg_inf();
        const float tail_value = has_tail ? Row::load1(row_x + split.tail + t) : neg_inf();

        // The floor of a chunk's first step, from its lanes' largest values taken as keys without a
        // column (equal values count, and fmaxf passes NaN over: both only lower the floor). Warp w's
        // j-th best of them has j of the chunk's elements at or above it (top_keys.cuh:
        // warp_kth_key). For k <= 32 each warp takes its own k-th best; for larger k, with
        // j = ceil(k / warps) <= 32, every warp holds j elements at or above the smallest of the
        // warps' j-th best, k in all: that one is the block's floor (one barrier, first step only).
        if (step == 0) {
            float best = fmaxf(head_value, tail_value);
#pragma unroll
            for (int e = 0; e < STEP; ++e) best = fmaxf(best, v[e]);
            const TopKey best_key = static_cast<TopKey>(order_bits(best)) << 32;
            const int warps = threads >> 5, j = k <= 32 ? k : (k + warps - 1) / warps;
            if (k <= 32) {
                thr_value = key_value(warp_kth_key(best_key, k));
            } else if (j <= 32) {
                const TopKey mine = warp_kth_key(best_key, j);
                if (lane == 0) atomicMin(&floor_key, mine);
                __syncthreads();
                thr_value = key_value(floor_key);
            }
        }
        unsigned int entering = 0u;   // bit e: slot e is a candidate
#pragma unroll
        for (int e = 0; e < STEP; ++e)
            if (base_vector + (e / VEC) * threads < split.n_vec && !(v[e] < thr_value)) entering |= 1u << e;
        if (has_head && !(head_value < thr_value)) entering |= 1u << STEP;
        if (has_tail && !(tail_value < thr_value)) entering |= 1u << (STEP + 1);

        // Append the candidates: a warp-wide prefix count of its lanes', one atomic per warp.
        const int mine = __popc(entering);
        if (__any_sync(TOP_FULL_MASK, mine != 0)) {
            int through = mine;
#pragma unroll
            for (int offset = 1; offset < 32; offset <<= 1) {
                const int other = __shfl_up_sync(TOP_FULL_MASK, through, offset);
                if (lane >= offset) through += other;
            }
            int warp_at = 0;
            if (lane == 31) warp_at = atomicAdd(&appended[step % 3], through);
            TopKey* at = buffer + held + __shfl_sync(TOP_FULL_MASK, warp_at, 31) + through - mine;
#pragma unroll
            for (int e = 0; e < STEP; ++e)   // slot e goes after the lane's candidates below it
                if ((entering >> e) & 1u)
                    at[__popc(entering & ((1u << e) - 1u))] =
                        top_key(v[e], split.head + (base_vector + (e / VEC) * threads) * VEC + e % VEC);
            if ((entering >> STEP) & 1u) at[__popc(entering & ((1u << STEP) - 1u))] = top_key(head_value, t);
            if ((entering >> (STEP + 1)) & 1u) at[mine - 1] = top_key(tail_value, split.tail + t);
        }
        // The head and tail elements first, as a pair (a missing one is -inf: folding it changes
        // nothing, l * 2^0 + 0), on the steps that may hold them; then the step's vectors.
        if ((chunk == 0 && step == 0) || (chunk == n_chunks - 1 && step == n_steps - 1)) {
            float ends[2] = {head_value, tail_value};
            online_push_exp2<2>(s, ends);
        }
        // The step's values fold as two halves of 8 (two re-scales): folded as one 16, the tree's loop
        // was left rolled inside this kernel and v went to local memory. v holds exponentials after.
        online_push_exp2<STEP / 2>(s, *reinterpret_cast<float(*)[STEP / 2]>(v));
        online_push_exp2<STEP / 2>(s, *reinterpret_cast<float(*)[STEP / 2]>(v + STEP / 2));

        __syncthreads();   // this step's candidates are in
        const int total = held + appended[step % 3];   // stable: its counter is next written at step + 3
        if (t == 0) appended[(step + 2) % 3] = 0;      // step + 2's counter, last read before this barrier
        if (total + room > capacity) {
            // Keep the k best: the radix select over the buffer, the chosen to the front (through
            // the free space past the candidates: total + room <= capacity + k); the threshold is the
            // floor from now on (every key below it has k keys above it).
            const SharedKeys candidates{buffer, total};
            const TopKey threshold = block_kth_key(candidates, k, &radix);
            block_gather_keys(candidates, threshold, k, &radix, buffer + total);
            for (int i = t; i < k; i += threads) buffer[i] = buffer[total + i];
            if (t == 0) floor_key = threshold;
            __syncthreads();
            held = k;
            thr_value = fmaxf(thr_value, key_value(floor_key));
        } else {
            held = total;
        }
    }

    const OnlineState whole = online_block_reduce(s, states);
    const SharedKeys candidates{buffer, held};
    const TopKey threshold = block_kth_key(candidates, k, &radix);
    TopKey* record = records + (row * n_chunks + chunk) * (k + 1);
    block_gather_keys(candidates, threshold, k, &radix, record + 1);
    for (int i = min(radix.count, k) + t; i < k; i += threads) record[1 + i] = 0ull;   // fewer than k here
    if (t == 0) record[0] = pack_state(whole);
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
    extern "C" __global__ void __launch_bounds__(256, 2) softmax_topk_06_split_chunks_##TAG(                   \
        const ROW::Elem* __restrict__ x, TopKey* __restrict__ records, int n_cols, long long x_row_stride,  \
        int n_chunks, int subs, int k, int capacity) {                                                       \
        if constexpr (topk_builds_row<ROW>())                                                                \
            split_chunk<ROW>(x, records, n_cols, x_row_stride, n_chunks, subs, k, capacity);                \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(1024) softmax_topk_06_split_merge_##TAG(                   \
        const TopKey* __restrict__ records, ROW::Elem* __restrict__ probs, long long* __restrict__ columns, \
        float* __restrict__ lse, int n_chunks, int k, int renormalize) {                                     \
        if constexpr (topk_builds_row<ROW>()) split_merge<ROW>(records, probs, columns, lse, n_chunks, k, renormalize); \
    }

SOFTMAX_TOPK_06(f32, F32Row)
SOFTMAX_TOPK_06(f16, F16Row)
SOFTMAX_TOPK_06(bf16, BF16Row)
