// sampling_01_rows — one token per row of logits, drawn from the softmax of x / temperature after the
// top-k, top-p and min-p filters, one block per row and no sort.
//
// For a row x (n logits) with temperature t, in fp32 (x widened exactly as it is loaded):
//   s_j = x_j / t,  M = max_j s_j,  w_j = e^{s_j - M}      (a token's weight; p_j = w_j / sum w)
//   top-k:  keep s_j >= s_(k), the k-th largest value (ties with it kept, as vLLM does)
//   top-p:  of those, keep s_j >= v, the largest v whose kept tokens at or above it weigh at least
//           p times all the kept tokens (the nucleus of the top-k distribution); weights summed
//           exactly as integers of 2^-32 (floor(w_j 2^32)), target ceil(p total)
//   min-p:  keep s_j >= M + log(min_p)                      (p_j >= min_p * max p)
//   token = argmax over the kept j of (s_j - M) + g_j,  g_j Gumbel noise of Philox4x32-10
// The argmax of the weights' logs plus Gumbel noise is a sample of the normalised weights (the
// Gumbel-max trick), so the normaliser is never needed and one pass over the kept tokens samples.
// g_j < GUMBEL_MAX, so a token whose s_j - M + GUMBEL_MAX is below a key already drawn in the block
// cannot win and draws no noise; the tokens that must draw are gathered per warp and drawn 32 at a
// time (GatheredDraws). The thresholds are exact values of the row, found without a sort: one pass
// sums each token's count and weight into a shared-memory histogram of 2048 bins of s - M (bin_filters);
// the bin where the count (top-k) or the weight (top-p) from the top reaches its target holds the
// threshold, and that bin's tokens, gathered into shared memory, give its exact key by a radix select
// over their order-preserving bits, eight bits per round, counting tokens or summing weights in
// 256-bucket histograms of 64-bit integers, one atomic per distinct digit among a warp's lanes
// (warp_add). Where a bin holds more than 2048 tokens (a nearly flat row) the same radix select runs
// over the whole row instead, four passes each. Every sum is exact, so the thresholds, and
// the tokens, do not depend on the order in which threads add. Ties of keys go to the lower index.
// g_j is word (j mod 4) of Philox(counter = (j / 4, row, offset_lo, offset_hi), key = (seed_lo,
// seed_hi)): the same seed and offset give the same tokens, whatever the launch geometry.
// Every pass reads the row as a scalar head to its first 16-byte boundary, one 16-byte vector per lane
// and step, and a scalar tail (for_each_token), each thread its tokens in increasing order.
// temperature < 1e-5 is greedy decoding: the first index of the largest logit, no noise.
// A row with a NaN or a +inf logit, or whose s overflows, or whose logits are all -inf, gets -1.
//
// Launch:  grid = (n_rows), block = (T), T a multiple of 32 up to 1024 chosen by the host from n.
//          Per-row parameters: temperature, top_k, top_p and min_p each a device array of n_rows
//          or, when its pointer is null, the scalar argument of the same name. top_k <= 0 or >= n,
//          top_p >= 1 and min_p <= 0 turn a filter off.
// Traffic: x read once to find M, once for the histogram (top-k or top-p), once more to gather top-k's
//          bin, once to sample (which also gathers top-p's bin): one read for greedy rows, two without
//          filters or with min-p, three with top-p, four with top-k or with both; a row
//          whose threshold bin is too full to gather adds four reads per radix select (the later
//          reads from L2 while the rows in flight fit in it). 8 bytes written per row.
// Limits:  1 <= n <= 2^31 - 2^16; x float32, float16 or bfloat16, rows strided (unit column
//          stride); top_p in (0, 1], min_p in [0, 1], temperature >= 0 (the host checks them).
#include "sampling_bins.cuh"

// The filters' thresholds from one histogram of the row over BINS bins of d = s - M (bin_of), each
// bin's token count and weight; then the tokens of the one bin that holds a threshold, gathered into
// shared memory (at most CANDIDATES of them), give its exact key by radix_select (sampling_bins.cuh), run on
// them alone. Top-k: the bin where the count from the top reaches k. Top-p (after top-k): the bin
// where the weight from the top reaches ceil(p total); when it is not top-k's bin, its tokens are
// gathered by the last pass (`pending`), which samples the bins above it at once.
// Returns false, having decided nothing, where a bin to gather holds more than CANDIDATES tokens
// (or top-k's bin is the last, unbounded one): the caller then runs the radix selects on the row.
struct FilterPlan {
    unsigned long long pending_remaining;   // top-p's weight left to reach inside the pending bin
    unsigned floor;                         // ordered bits of the lowest key kept by top-k (and top-p)
    int pending;                            // top-p's bin, gathered by the last pass; -1: none
    bool done;                              // false: nothing decided (a bin too full to gather)
};

template <class Row>
__device__ __noinline__ FilterPlan bin_filters(const typename Row::Elem* row_x, int n, float t, float m, int k,
                                               float p, SampleShared& sh, BinShared& bs) {
    FilterPlan plan{0ull, 0u, -1, true};
    const FilterPlan refused{0ull, 0u, -1, false};
    const bool use_k = k > 0 && k < n, use_p = p < 1.0f;
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) { bs.count[b] = 0u; bs.mass[b] = 0ull; }
    __syncthreads();
    for_each_token<Row>(row_x, n, t, [&](int, float s, bool valid) {
        if (!valid) return;                    // (a lane past the row: its s is a stand-in, not binned)
        const int b = bin_of(s - m);
        if (b == BINS - 1) return;             // the last bin: weights of 0, its count never needed
        atomicAdd(&bs.count[b], 1u);
        const unsigned long long w = use_p ? fixed_weight(s, m) : 0ull;
        if (w != 0ull) shared_add_u64(&bs.mass[b], w);
    });
    __syncthreads();
    if (threadIdx.x == 0) bs.count[BINS - 1] = static_cast<unsigned>(n);   // bounds every pick
    __syncthreads();
    const Candidates candidates{bs};
    int bin_k = -1;
    if (use_k) {
        unsigned long long remaining = static_cast<unsigned>(k);
        bin_k = pick_bin(bs.count, remaining, 0.0f, bs);
        if (bin_k == BINS - 1 || bs.count[bin_k] > CANDIDATES) return refused;
        gather_bin<Row>(row_x, n, t, m, bin_k, bs);
        plan.floor = radix_select<false>(candidates, m, 0u, remaining, 0.0f, sh);
        if (!use_p) return plan;
        // top-p weighs the tokens top-k kept: bin_k's own at or above the k-th, none below
        if (threadIdx.x == 0) bs.total = 0ull;
        __syncthreads();
        unsigned long long mine = 0ull;
        for (int i = threadIdx.x; i < static_cast<int>(bs.n_candidates); i += blockDim.x)
            if (ordered_bits(bs.s[i]) >= plan.floor) mine += fixed_weight(bs.s[i], m);
        if (mine != 0ull) shared_add_u64(&bs.total, mine);
        __syncthreads();
        for (int b = bin_k + 1 + threadIdx.x; b < BINS; b += blockDim.x) bs.mass[b] = 0ull;
        if (threadIdx.x == 0) bs.mass[bin_k] = bs.total;
        __syncthreads();
    }
    if (!use_p) return plan;
    unsigned long long remaining = 0ull;
    const int bin_p = pick_bin(bs.mass, remaining, p, bs);
    if (bin_p == bin_k) {   // top-p's threshold is among top-k's gathered tokens
        plan.floor = max(plan.floor, radix_select<true>(candidates, m, plan.floor, remaining, 0.0f, sh));
        return plan;
    }
    if (bs.count[bin_p] > CANDIDATES) return refused;
    plan.pending = bin_p;
    plan.pending_remaining = remaining;
    return plan;
}

// The draw: the tokens a warp must draw noise for are queued in shared memory, 64 slots per warp in
// bs.mass (free once the thresholds are known; d's bits above the token's index in one word), and
// drawn 32 at a time, so that Philox and the two logarithms run with every lane busy rather than
// whenever any lane needs them. A token with d + GUMBEL_MAX below the best key drawn in the block so
// far (`bound`, its ordered bits in sh.draw_bound, raised after each batch) cannot win, its key being
// at most d + GUMBEL_MAX in float32, and is not queued. Each thread's best (key, index) waits in
// bs.count (its ordered bits at [threadIdx.x], its index at [1024 + threadIdx.x]), not in registers.
// Ties go to the lower index (beats), so the pick is the drawn tokens' argmax whatever order they
// are drawn in. Called by all 32 lanes of a warp.
struct GatheredDraws {
    int queued;   // the same in every lane
    float bound;

    static __device__ __forceinline__ int slot0() { return (threadIdx.x >> 5) * 64; }   // this warp's 64 slots

    __device__ __forceinline__ void push(bool draws, int j, float d, BinShared& bs, SampleShared& sh,
                                         const GumbelKeys& noise) {
        const unsigned mask = __ballot_sync(0xffffffffu, draws);
        if (mask == 0u) return;
        const int lane = threadIdx.x & 31;
        if (draws)
            bs.mass[slot0() + queued + __popc(mask & ((1u << lane) - 1u))] =
                (static_cast<unsigned long long>(__float_as_uint(d)) << 32) | static_cast<unsigned>(j);
        queued += __popc(mask);
        if (queued < 32) return;
        __syncwarp();
        draw(32, bs, sh, noise);
        const int left = queued - 32;   // at most 31 more, moved to the front
        const unsigned long long moved = lane < left ? bs.mass[slot0() + 32 + lane] : 0ull;
        __syncwarp();
        if (lane < left) bs.mass[slot0() + lane] = moved;
        __syncwarp();
        queued = left;
    }

    // Lanes below `count` draw the token in their slot; then the block's bound is raised.
    __device__ __forceinline__ void draw(int count, BinShared& bs, SampleShared& sh, const GumbelKeys& noise) {
        const int lane = threadIdx.x & 31;
        unsigned mine = bs.count[threadIdx.x];
        if (lane < count) {
            const unsigned long long slot = bs.mass[slot0() + lane];
            const int j = static_cast<int>(static_cast<unsigned>(slot));
            const unsigned bits = ordered_bits(noise.fresh_key(j, __uint_as_float(static_cast<unsigned>(slot >> 32))));
            if (bits > mine || (bits == mine && j < static_cast<int>(bs.count[1024 + threadIdx.x]))) {
                mine = bits;
                bs.count[threadIdx.x] = bits;
                bs.count[1024 + threadIdx.x] = static_cast<unsigned>(j);
            }
        }
        const unsigned warp_best = __reduce_max_sync(0xffffffffu, mine);
        if (lane == 0) atomicMax(&sh.draw_bound, warp_best);
        const unsigned block_best = max(warp_best, *reinterpret_cast<volatile unsigned*>(&sh.draw_bound));
        bound = (block_best & 0x80000000u) ? __uint_as_float(block_best & 0x7fffffffu) : __uint_as_float(~block_best);
    }

    __device__ __forceinline__ void flush(BinShared& bs, SampleShared& sh, const GumbelKeys& noise) {
        __syncwarp();
        if (queued > 0) draw(queued, bs, sh, noise);
        queued = 0;
    }
};

template <class Row>
__device__ __forceinline__ void sample_row(const typename Row::Elem* x, long long* __restrict__ tokens,
                                           const float* __restrict__ temperatures, const int* __restrict__ top_ks,
                                           const float* __restrict__ top_ps, const float* __restrict__ min_ps,
                                           float temperature, int top_k, float top_p, float min_p, int n,
                                           long long x_stride, unsigned seed_lo, unsigned seed_hi,
                                           unsigned offset_lo, unsigned offset_hi) {
    __shared__ SampleShared sh;
    __shared__ BinShared bs;
    const int row = blockIdx.x;
    const typename Row::Elem* row_x = x + static_cast<long long>(row) * x_stride;
    const float t_row = temperatures ? temperatures[row] : temperature;
    const bool greedy = t_row < SAMPLING_GREEDY_BELOW;
    const float t = greedy ? 1.0f : t_row;

    // pass 1: M and its first index; a NaN or +inf (given, or by the division) marks the row
    float m = neg_inf();
    int first = 0x7fffffff;
    for_each_token<Row>(row_x, n, t, [&](int j, float s, bool valid) {
        const float key = (isnan(s) || s == -neg_inf()) ? -neg_inf() : s;
        if (valid && key > m) { m = key; first = j; }
    });
    block_pick(m, first, sh.keys, sh.indices);
    if (m == -neg_inf() || m == neg_inf()) {
        if (threadIdx.x == 0) tokens[row] = -1;
        return;
    }
    if (greedy) {
        if (threadIdx.x == 0) tokens[row] = first;
        return;
    }

    // the filters: a floor on the ordered bits of s (top-p's may be left pending for the last pass)
    const int k = top_ks ? top_ks[row] : top_k;
    const float p = top_ps ? top_ps[row] : top_p;
    const float q = min_ps ? min_ps[row] : min_p;
    const bool use_k = k > 0 && k < n, use_p = p < 1.0f;
    const RowTokens<Row> row_tokens{row_x, n, t};
    FilterPlan plan{0ull, 0u, -1, true};
    if (use_k || use_p) plan = bin_filters<Row>(row_x, n, t, m, k, p, sh, bs);
    if (!plan.done) {   // a bin too full to gather: the radix selects over the whole row
        plan.floor = use_k ? radix_select<false>(row_tokens, m, 0u, static_cast<unsigned>(k), 0.0f, sh) : 0u;
        if (use_p) plan.floor = max(plan.floor, radix_select<true>(row_tokens, m, plan.floor, 0ull, p, sh));
    }
    const unsigned floor = plan.floor;
    const int pending = plan.pending;
    const unsigned long long pending_remaining = plan.pending_remaining;
    const unsigned kept = q > 0.0f ? max(floor, ordered_bits(m + logf(q))) : floor;

    // the last pass: Gumbel-max over the kept tokens; token j's noise is word j % 4 of the Philox draw
    // of group j / 4, drawn only for a token that could still beat the block's best so far, gathered
    // per warp (GatheredDraws). With top-p's bin pending, the tokens above it are kept for sure and those below it are not; its own are
    // gathered, top-p's key is found among them, and those at or above it join the draw.
    __syncthreads();   // every thread is done with the thresholds' bins (bs.count, bs.mass), reused below
    if (threadIdx.x == 0) {
        sh.draw_bound = ordered_bits(neg_inf());
        // what draw_pending needs after the pass waits in shared memory, not registers
        bs.n_candidates = 0u; bs.floor = floor; bs.pending_remaining = pending_remaining;
    }
    bs.count[threadIdx.x] = ordered_bits(neg_inf());   // this thread's best so far: none
    bs.count[1024 + threadIdx.x] = 0x7fffffffu;
    __syncthreads();
    const GumbelKeys noise(row, offset_lo, offset_hi, seed_lo, seed_hi);
    GatheredDraws queue{0, neg_inf()};
    for_each_token<Row>(row_x, n, t, [&](int j, float s, bool valid) {   // all lanes together
        const float d = s - m, top = d + GUMBEL_MAX;
        bool draws = valid;
        if (valid && pending >= 0) {
            const int b = bin_of(d);
            if (b == pending) {
                const unsigned slot = atomicAdd(&bs.n_candidates, 1u);
                bs.s[slot] = s;
                bs.index[slot] = j;
            }
            draws = b < pending;
        }
        queue.push(draws && ordered_bits(s) >= kept && top >= queue.bound && top > neg_inf(), j, d, bs, sh, noise);
    });
    queue.flush(bs, sh, noise);
    const unsigned best_bits = bs.count[threadIdx.x];   // (only this thread wrote its slots)
    float best = (best_bits & 0x80000000u) ? __uint_as_float(best_bits & 0x7fffffffu) : __uint_as_float(~best_bits);
    int pick = static_cast<int>(bs.count[1024 + threadIdx.x]);
    if (pending >= 0) {
        __syncthreads();
        const Pick drawn = draw_pending(bs, sh, m, bs.floor, kept, bs.pending_remaining, Pick{best, pick},
                                        GumbelKeys(row, offset_lo, offset_hi, seed_lo, seed_hi));
        best = drawn.key;
        pick = drawn.index;
    }
    block_pick(best, pick, sh.keys, sh.indices);
    if (threadIdx.x == 0) tokens[row] = best == neg_inf() ? -1 : pick;
}

#define SAMPLING_ARGS(ROW)                                                                                 \
    const ROW::Elem *__restrict__ x, long long *__restrict__ tokens, const float *__restrict__ temperatures, \
        const int *__restrict__ top_ks, const float *__restrict__ top_ps, const float *__restrict__ min_ps,  \
        float temperature, int top_k, float top_p, float min_p, int n, long long x_stride, unsigned seed_lo,  \
        unsigned seed_hi, unsigned offset_lo, unsigned offset_hi
#define SAMPLING_CALL(ROW)                                                                                 \
    sample_row<ROW>(x, tokens, temperatures, top_ks, top_ps, min_ps, temperature, top_k, top_p, min_p, n,   \
                    x_stride, seed_lo, seed_hi, offset_lo, offset_hi)

extern "C" __global__ void __launch_bounds__(1024) sampling_01_rows_f32(SAMPLING_ARGS(F32Row)) {
    SAMPLING_CALL(F32Row);
}

extern "C" __global__ void __launch_bounds__(1024) sampling_01_rows_f16(SAMPLING_ARGS(F16Row)) {
    SAMPLING_CALL(F16Row);
}

extern "C" __global__ void __launch_bounds__(1024) sampling_01_rows_bf16(SAMPLING_ARGS(BF16Row)) {
    SAMPLING_CALL(BF16Row);
}
