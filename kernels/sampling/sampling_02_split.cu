// sampling_02_split — sampling_01_rows for a few long rows: each row split into chunks, one block per
// chunk, so that a batch of one row of 262,144 logits reads with dozens of SMs instead of one.
//
// Changed from sampling_01_rows: the same keys, weights, thresholds and Gumbel noise (the definitions
//               are in sampling_01_rows.cu's header), so the same tokens, but each of the row's
//               passes is one launch over its chunks. A block reduces its chunk (a maximum, its
//               share of the row's 2048-bin histogram, a best key) and adds it to the row's partials
//               in global memory; the last block of the row to arrive (an atomic counter, after a
//               fence) combines them and writes the decision into the row's state, which the next
//               launch reads. Every sum is of integers, so the decisions equal sampling_01_rows' to
//               the bit. Passes (the `pass` argument):
//                 PASS_MAX     M and its first index.
//                 PASS_BINS    the row's histogram (global atomics of each block's shared one); the last
//                              block picks top-k's bin, or top-p's where top-k is off.
//                 PASS_GATHER  top-k's bin gathered (at most 2048 tokens, into the row's candidates);
//                              the last block finds the k-th key among them by a radix select, then
//                              top-p's bin over the tokens top-k keeps.
//                 PASS_SAMPLE  Gumbel-max over the chunk's kept tokens, top-p's bin (when not yet
//                              resolved) gathered on the way; the last block finds top-p's key among
//                              that bin's tokens, draws those kept, and combines every chunk's best.
//               A bin too full to gather (over 2048 tokens: a nearly flat row) is resolved by the
//               last block alone with radix selects over the whole row (four reads each). The host
//               launches PASS_BINS when some row uses top-k or top-p and PASS_GATHER when some row
//               uses top-k; a row whose token is known (greedy, refused) or that does not use a
//               filter leaves those passes at once.
// Launch:       grid = (C, n_rows), block = (T), T a multiple of 32 up to 1024; chunk c of a row holds
//               tokens [c * chunk_elems, min(n, (c + 1) * chunk_elems)), C = ceil(n / chunk_elems).
//               Workspace: `states` (n_rows SplitState, zero before the first launch), `bin_count`
//               and `bin_mass` (n_rows x 2048, zero before the first launch) and `cand_s`,
//               `cand_index` (n_rows x 2048) where a call uses top-k or top-p (null otherwise),
//               `key_part` and `index_part` (n_rows x C). Every call leaves the counters and the
//               histograms at zero.
// Traffic:      x read once for M, once for the histogram, once to gather top-k's bin, once to
//               sample: one read for greedy rows, two with min-p alone or without filters, three
//               with top-p, four with top-k; 8 bytes written per row.
// Limits:       sampling_01_rows' (1 <= n <= 2^31 - 2^16; float32, float16 or bfloat16 logits, rows
//               strided with unit column stride; per-row or scalar parameters); chunks of 1 .. 2^31
//               - 2^16 tokens; n_rows <= 65535 (the grid's y). One call at a time per workspace.
#include "sampling_bins.cuh"

#define PASS_MAX 0
#define PASS_BINS 1
#define PASS_GATHER 2
#define PASS_SAMPLE 3

// A row's decisions so far, written by the last block of a pass, read by the next launch.
struct SplitState {
    float m;                       // M = max s (+inf: a NaN or +inf logit; -inf: no finite logit)
    int first;                     // M's first index
    unsigned floor;                // ordered bits of the lowest key kept so far
    int done;                      // the token is written (greedy, refused): later passes skip the row
    unsigned long long remaining;  // what is left to reach inside the bin `gather`: top-k's count, top-p's weight
    int gather;                    // the bin the next pass gathers (top-k's, then top-p's); -1: none
    unsigned n_candidates;         // tokens gathered so far into the row's candidates
    unsigned arrivals;             // blocks of the row done with the current pass
    unsigned unused;
};

// After the block's partial is stored: true in every thread of the row's last block to arrive, which
// then sees every other block's partial (release by fence + counter; acquire by fence). That block
// sets the counter back to zero for the next pass.
__device__ __forceinline__ bool arrive_last(unsigned* arrivals, unsigned n_chunks, int* flag) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned before = atomicAdd(arrivals, 1u);
        *flag = before == n_chunks - 1;
        if (*flag) *arrivals = 0u;
    }
    __syncthreads();
    const bool last = *flag != 0;
    if (last) __threadfence();
    return last;
}

// The row's best (key, index) over its chunks' partials (the larger key, the lower index on a tie).
__device__ __forceinline__ void combine_picks(const float* key_part, const int* index_part, int n_chunks,
                                              float& key, int& index, SampleShared& sh) {
    key = neg_inf();
    index = 0x7fffffff;
    for (int c = threadIdx.x; c < n_chunks; c += blockDim.x) {
        const float k = __ldcg(key_part + c);
        const int i = __ldcg(index_part + c);
        if (beats(k, i, key, index)) { key = k; index = i; }
    }
    block_pick(key, index, sh.keys, sh.indices);
}

// for_each_token over the chunk [start, start + length) of a row, tokens numbered in the row.
template <class Row, class Visit>
__device__ __forceinline__ void for_each_chunk_token(const typename Row::Elem* row_x, int start, int length, float t,
                                                     Visit visit) {
    for_each_token<Row>(row_x + start, length, t, [&](int j, float s, bool valid) { visit(start + j, s, valid); });
}

// The row's gathered tokens, from global memory into bs (the last block of a pass, after every block
// appended its own).
__device__ __forceinline__ void load_candidates(const float* cand_s, const int* cand_index, unsigned count,
                                                BinShared& bs) {
    for (int i = threadIdx.x; i < static_cast<int>(count); i += blockDim.x) {
        bs.s[i] = __ldcg(cand_s + i);
        bs.index[i] = __ldcg(cand_index + i);
    }
    if (threadIdx.x == 0) bs.n_candidates = count;
    __syncthreads();
}

// The block's gathered tokens (bs, after a barrier) appended to the row's in global memory; `slot`, a
// shared int, carries where they start.
__device__ __forceinline__ void append_candidates(const BinShared& bs, float* cand_s, int* cand_index,
                                                  unsigned* n_candidates, int& slot) {
    const unsigned count = bs.n_candidates;
    if (threadIdx.x == 0) slot = count != 0u ? static_cast<int>(atomicAdd(n_candidates, count)) : 0;
    __syncthreads();
    const int base = slot;
    for (int i = threadIdx.x; i < static_cast<int>(count); i += blockDim.x) {
        cand_s[base + i] = bs.s[i];
        cand_index[base + i] = bs.index[i];
    }
    __syncthreads();   // slot may be written again right after
}

// The row's histogram back to zero for the next call, once no pass needs it.
__device__ __forceinline__ void clear_bins(unsigned* count, unsigned long long* mass) {
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) { count[b] = 0u; mass[b] = 0ull; }
}

// PASS_BINS' last block: the row's histogram from global memory, then top-k's bin (or top-p's where
// top-k is off) to gather next; where that bin is too full to gather, the thresholds by radix selects
// over the whole row instead. Not inlined (nor the next): the passes' loops keep their registers.
template <class Row>
__device__ __noinline__ void decide_bins(RowTokens<Row> row_tokens, float m, int k, float p, SplitState& st,
                                         unsigned* row_count, unsigned long long* row_mass, SampleShared& sh,
                                         BinShared& bs) {
    const int n = row_tokens.n;
    const bool use_k = k > 0 && k < n, use_p = p < 1.0f;
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
        bs.count[b] = b == BINS - 1 ? static_cast<unsigned>(n) : __ldcg(row_count + b);   // n bounds every pick
        bs.mass[b] = __ldcg(row_mass + b);
    }
    __syncthreads();
    unsigned long long remaining = use_k ? static_cast<unsigned long long>(k) : 0ull;
    const int bin = use_k ? pick_bin(bs.count, remaining, 0.0f, bs) : pick_bin(bs.mass, remaining, p, bs);
    const bool too_full = bin == BINS - 1 || bs.count[bin] > CANDIDATES;
    unsigned floor = 0u;
    if (too_full) {   // the radix selects over the whole row, by this block alone
        floor = use_k ? radix_select<false>(row_tokens, m, 0u, static_cast<unsigned>(k), 0.0f, sh) : 0u;
        if (use_p) floor = max(floor, radix_select<true>(row_tokens, m, floor, 0ull, p, sh));
    }
    if (too_full || !use_k) clear_bins(row_count, row_mass);   // (PASS_GATHER reads top-p's weights)
    if (threadIdx.x == 0) { st.floor = floor; st.gather = too_full ? -1 : bin; st.remaining = remaining; }
}

// PASS_GATHER's last block, first: top-k's k-th key among its bin's tokens, gathered into bs.
__device__ __noinline__ unsigned select_k(const float* row_s, const int* row_index, SplitState& st, float m,
                                          SampleShared& sh, BinShared& bs) {
    load_candidates(row_s, row_index, __ldcg(&st.n_candidates), bs);
    return radix_select<false>(Candidates{bs}, m, 0u, st.remaining, 0.0f, sh);
}

// Then, with top-p, top-p's bin over the tokens top-k keeps (bin_k's own at or above the k-th, none
// below): resolved among the same tokens, by radix selects over the whole row where that bin is too
// full, or left pending for PASS_SAMPLE to gather. The row's histogram goes back to zero.
template <class Row>
__device__ __noinline__ void decide_gathered(RowTokens<Row> row_tokens, float m, float p, int bin_k, unsigned floor,
                                             SplitState& st, unsigned* row_count, unsigned long long* row_mass,
                                             SampleShared& sh, BinShared& bs) {
    int pending = -1;
    unsigned long long remaining = 0ull;
    if (p < 1.0f) {
        if (threadIdx.x == 0) bs.total = 0ull;
        for (int b = threadIdx.x; b < BINS; b += blockDim.x) {
            bs.count[b] = __ldcg(row_count + b);
            bs.mass[b] = b < bin_k ? __ldcg(row_mass + b) : 0ull;
        }
        __syncthreads();
        unsigned long long mine = 0ull;
        for (int i = threadIdx.x; i < static_cast<int>(bs.n_candidates); i += blockDim.x)
            if (ordered_bits(bs.s[i]) >= floor) mine += fixed_weight(bs.s[i], m);
        if (mine != 0ull) shared_add_u64(&bs.total, mine);
        __syncthreads();
        if (threadIdx.x == 0) bs.mass[bin_k] = bs.total;
        __syncthreads();
        const int bin_p = pick_bin(bs.mass, remaining, p, bs);
        if (bin_p == bin_k) floor = max(floor, radix_select<true>(Candidates{bs}, m, floor, remaining, 0.0f, sh));
        else if (bs.count[bin_p] > CANDIDATES) floor = max(floor, radix_select<true>(row_tokens, m, floor, 0ull, p, sh));
        else pending = bin_p;
    }
    clear_bins(row_count, row_mass);
    if (threadIdx.x == 0) { st.floor = floor; st.gather = pending; st.remaining = remaining; st.n_candidates = 0u; }
}

// PASS_SAMPLE's last block: the best of every chunk's key; with top-p's bin pending, top-p's key among
// its gathered tokens and the draw of those kept; the token. Not inlined: the pass's loop keeps its
// registers.
__device__ __noinline__ void finish_sample(const float* key_part, const int* index_part, int n_chunks, bool pending,
                                           const float* row_s, const int* row_index, float m, unsigned kept,
                                           SplitState& st, GumbelKeys noise, long long* token, SampleShared& sh,
                                           BinShared& bs) {
    float best;
    int pick;
    combine_picks(key_part, index_part, n_chunks, best, pick, sh);
    if (pending) {
        load_candidates(row_s, row_index, __ldcg(&st.n_candidates), bs);
        const Pick drawn = draw_candidates(bs, sh, m, st.floor, kept, st.remaining, Pick{best, pick}, noise);
        best = drawn.key;
        pick = drawn.index;
        block_pick(best, pick, sh.keys, sh.indices);
    }
    if (threadIdx.x == 0) {
        *token = best == neg_inf() ? -1 : pick;
        st.n_candidates = 0u;
    }
}

// One pass (PASS, a constant: each pass compiled on its own, its registers its own).
template <class Row, int PASS>
__device__ __noinline__ void split_pass(const typename Row::Elem* x, long long* __restrict__ tokens,
                                           const float* __restrict__ temperatures, const int* __restrict__ top_ks,
                                           const float* __restrict__ top_ps, const float* __restrict__ min_ps,
                                           float temperature, int top_k, float top_p, float min_p, int n,
                                           long long x_stride, unsigned seed_lo, unsigned seed_hi,
                                           unsigned offset_lo, unsigned offset_hi, SplitState* states,
                                           unsigned* bin_count, unsigned long long* bin_mass, float* cand_s,
                                           int* cand_index, float* key_part, int* index_part, int chunk_elems,
                                           SampleShared& sh, BinShared& bs, int& last_flag) {
    constexpr int pass = PASS;
    const int chunk = blockIdx.x, n_chunks = gridDim.x, row = blockIdx.y;
    const int start = chunk * chunk_elems, length = min(n - start, chunk_elems);
    const typename Row::Elem* row_x = x + static_cast<long long>(row) * x_stride;
    SplitState& st = states[row];
    const float t_row = temperatures ? temperatures[row] : temperature;
    const bool greedy = t_row < SAMPLING_GREEDY_BELOW;
    const float t = greedy ? 1.0f : t_row;
    const long long part = static_cast<long long>(row) * n_chunks + chunk;

    if (pass == PASS_MAX) {   // M and its first index; a NaN or +inf marks the row
        float m = neg_inf();
        int first = 0x7fffffff;
        for_each_chunk_token<Row>(row_x, start, length, t, [&](int j, float s, bool valid) {
            const float key = (isnan(s) || s == -neg_inf()) ? -neg_inf() : s;
            if (valid && key > m) { m = key; first = j; }
        });
        block_pick(m, first, sh.keys, sh.indices);
        if (threadIdx.x == 0) { key_part[part] = m; index_part[part] = first; }
        if (!arrive_last(&st.arrivals, n_chunks, &last_flag)) return;
        combine_picks(key_part + part - chunk, index_part + part - chunk, n_chunks, m, first, sh);
        if (threadIdx.x == 0) {
            const bool refused = m == -neg_inf() || m == neg_inf();
            if (refused || greedy) tokens[row] = refused ? -1 : first;
            st.m = m;
            st.first = first;
            st.floor = 0u;
            st.done = refused || greedy;
            st.gather = -1;
        }
        return;
    }
    if (st.done) return;
    const float m = st.m;
    const int k = top_ks ? top_ks[row] : top_k;
    const float p = top_ps ? top_ps[row] : top_p;
    const bool use_k = k > 0 && k < n, use_p = p < 1.0f;
    unsigned* row_count = bin_count + static_cast<long long>(row) * BINS;
    unsigned long long* row_mass = bin_mass + static_cast<long long>(row) * BINS;
    float* row_s = cand_s + static_cast<long long>(row) * CANDIDATES;
    int* row_index = cand_index + static_cast<long long>(row) * CANDIDATES;
    const RowTokens<Row> row_tokens{row_x, n, t};

    if (pass == PASS_BINS) {   // each token's count and weight into its bin of d = s - M
        if (!use_k && !use_p) return;
        for (int b = threadIdx.x; b < BINS; b += blockDim.x) { bs.count[b] = 0u; bs.mass[b] = 0ull; }
        __syncthreads();
        for_each_chunk_token<Row>(row_x, start, length, t, [&](int, float s, bool valid) {
            if (!valid) return;
            const int b = bin_of(s - m);
            if (b == BINS - 1) return;             // the last bin: weights of 0, its count never needed
            atomicAdd(&bs.count[b], 1u);
            const unsigned long long w = use_p ? fixed_weight(s, m) : 0ull;
            if (w != 0ull) shared_add_u64(&bs.mass[b], w);
        });
        __syncthreads();
        for (int b = threadIdx.x; b < BINS - 1; b += blockDim.x) {
            if (bs.count[b] != 0u) atomicAdd(row_count + b, bs.count[b]);
            if (bs.mass[b] != 0ull) atomicAdd(row_mass + b, bs.mass[b]);
        }
        if (arrive_last(&st.arrivals, n_chunks, &last_flag)) decide_bins<Row>(row_tokens, m, k, p, st, row_count, row_mass, sh, bs);
        return;
    }

    if (pass == PASS_GATHER) {   // top-k's bin, then its k-th key, then top-p's bin over what top-k keeps
        if (!use_k || st.gather < 0) return;
        const int bin_k = st.gather;
        for_each_chunk_token<Row>(row_x, start, length, t, [&](int j, float s, bool valid) {
            if (!valid || bin_of(s - m) != bin_k) return;
            const unsigned slot = atomicAdd(&st.n_candidates, 1u);
            row_s[slot] = s;
            row_index[slot] = j;
        });
        if (!arrive_last(&st.arrivals, n_chunks, &last_flag)) return;
        const unsigned floor = select_k(row_s, row_index, st, m, sh, bs);
        decide_gathered<Row>(row_tokens, m, p, bin_k, floor, st, row_count, row_mass, sh, bs);
        return;
    }

    // PASS_SAMPLE: Gumbel-max over the kept tokens (min-p's floor joins here). With top-p's bin pending,
    // the tokens above it are kept for sure and those below it are not; its own are gathered, and the
    // last block finds top-p's key among them and draws those at or above it.
    const float q = min_ps ? min_ps[row] : min_p;
    const unsigned kept = q > 0.0f ? max(st.floor, ordered_bits(m + logf(q))) : st.floor;
    const int pending = st.gather;
    if (pending >= 0) {
        if (threadIdx.x == 0) bs.n_candidates = 0u;
        __syncthreads();
    }
    const bool top_p_only = pending >= 0 && !use_k;   // as in sampling_01_rows: lanes load their groups together
    GumbelKeys noise(row, offset_lo, offset_hi, seed_lo, seed_hi);
    float best = neg_inf();
    int pick = 0x7fffffff;
    for_each_chunk_token<Row>(row_x, start, length, t, [&](int j, float s, bool valid) {   // all 32 lanes together
        const float d = s - m;
        bool draws = valid;
        if (valid && pending >= 0) {
            const int b = bin_of(d);
            if (b == pending) {   // (into shared memory first: fewer registers held by the loop)
                const unsigned slot = atomicAdd(&bs.n_candidates, 1u);
                bs.s[slot] = s;
                bs.index[slot] = j;
            }
            draws = b < pending;
        }
        draws = draws && ordered_bits(s) >= kept && d + GUMBEL_MAX > best;
        if (top_p_only) noise.draw_group(j, draws);
        if (!draws) return;
        const float key = noise.key(j, d);
        if (key > best) { best = key; pick = j; }
    });
    block_pick(best, pick, sh.keys, sh.indices);   // (its barriers also end the gather into bs)
    if (threadIdx.x == 0) { key_part[part] = best; index_part[part] = pick; }
    if (pending >= 0) append_candidates(bs, row_s, row_index, &st.n_candidates, last_flag);
    if (!arrive_last(&st.arrivals, n_chunks, &last_flag)) return;
    finish_sample(key_part + part - chunk, index_part + part - chunk, n_chunks, pending >= 0, row_s, row_index, m,
                  kept, st, GumbelKeys(row, offset_lo, offset_hi, seed_lo, seed_hi), tokens + row, sh, bs);
}

#define SPLIT_ARGS(ROW)                                                                                    \
    const ROW::Elem *__restrict__ x, long long *__restrict__ tokens, const float *__restrict__ temperatures, \
        const int *__restrict__ top_ks, const float *__restrict__ top_ps, const float *__restrict__ min_ps,  \
        float temperature, int top_k, float top_p, float min_p, int n, long long x_stride, unsigned seed_lo,  \
        unsigned seed_hi, unsigned offset_lo, unsigned offset_hi, SplitState *__restrict__ states,            \
        unsigned *__restrict__ bin_count, unsigned long long *__restrict__ bin_mass, float *__restrict__ cand_s, \
        int *__restrict__ cand_index, float *__restrict__ key_part, int *__restrict__ index_part, int chunk_elems, \
        int pass
#define SPLIT_PASS(ROW, PASS)                                                                              \
    split_pass<ROW, PASS>(x, tokens, temperatures, top_ks, top_ps, min_ps, temperature, top_k, top_p, min_p, n, \
                          x_stride, seed_lo, seed_hi, offset_lo, offset_hi, states, bin_count, bin_mass, cand_s, \
                          cand_index, key_part, index_part, chunk_elems, sh, bs, last_flag)
#define SPLIT_CALL(ROW)                                                                                    \
    __shared__ SampleShared sh;                                                                            \
    __shared__ BinShared bs;                                                                               \
    __shared__ int last_flag;                                                                              \
    if (pass == PASS_MAX) SPLIT_PASS(ROW, PASS_MAX);                                                       \
    else if (pass == PASS_BINS) SPLIT_PASS(ROW, PASS_BINS);                                                \
    else if (pass == PASS_GATHER) SPLIT_PASS(ROW, PASS_GATHER);                                            \
    else SPLIT_PASS(ROW, PASS_SAMPLE)

extern "C" __global__ void __launch_bounds__(1024) sampling_02_split_f32(SPLIT_ARGS(F32Row)) { SPLIT_CALL(F32Row); }

extern "C" __global__ void __launch_bounds__(1024) sampling_02_split_f16(SPLIT_ARGS(F16Row)) { SPLIT_CALL(F16Row); }

extern "C" __global__ void __launch_bounds__(1024) sampling_02_split_bf16(SPLIT_ARGS(BF16Row)) { SPLIT_CALL(BF16Row); }
