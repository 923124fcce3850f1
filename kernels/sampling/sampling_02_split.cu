// sampling_02_split — sampling_01_rows for a few long rows: each row split into chunks, one block per
// chunk, so that a batch of one row of 262,144 logits reads with dozens of SMs instead of one.
//
// Changed from sampling_01_rows: the same keys, weights, thresholds and Gumbel noise (the definitions
//               are in sampling_01_rows.cu's header), so the same tokens, but each of the row's
//               passes is one launch over its chunks. A block reduces its chunk (a maximum, a
//               256-bucket histogram of integers, a best key) into a partial in global memory; the
//               last block of the row to arrive (an atomic counter, after a fence) combines the row's
//               partials and writes the decision into the row's state: M and its first index, the
//               digit of the radix select, the threshold, the token. The next launch reads that state.
//               Every sum is of integers, so the decisions equal sampling_01_rows' to the bit.
//               Passes (the `pass` argument): PASS_MAX; four top-k digits (PASS_TOP_K + 0 .. 3, bits
//               31..24 first); four top-p digits (PASS_TOP_P + 0 .. 3); PASS_SAMPLE. The host launches
//               the top-k and top-p passes only when some row uses the filter; a row whose token is
//               already known (greedy, refused) or that does not use a filter leaves those passes at once.
// Launch:       grid = (C, n_rows), block = (T), T a multiple of 32 up to 1024; chunk c of a row holds
//               tokens [c * chunk_elems, min(n, (c + 1) * chunk_elems)), C = ceil(n / chunk_elems).
//               Workspace: `state` (n_rows SplitState, arrivals zero before the first launch; the last
//               block of each pass sets them back to zero), `hist_part` (n_rows x C x 256 uint64),
//               `key_part` and `index_part` (n_rows x C).
// Traffic:      as sampling_01_rows (x read once for M, once per radix digit, once to sample), each
//               launch over every row; the partials, 2 KB a chunk per radix digit, are read once, by
//               the last block. 8 bytes written per row.
// Limits:       sampling_01_rows' (1 <= n <= 2^31 - 2^16; float32, float16 or bfloat16 logits, rows
//               strided with unit column stride; per-row or scalar parameters); chunks of 1 .. 2^31
//               - 2^16 tokens; n_rows <= 65535 (the grid's y). One call at a time per workspace.
#include "sampling_select.cuh"

#define PASS_MAX 0
#define PASS_TOP_K 1
#define PASS_TOP_P 5
#define PASS_SAMPLE 9

// A row's decisions so far, written by the last block of a pass, read by the next launch.
struct SplitState {
    float m;                       // M = max s (+inf: a NaN or +inf logit; -inf: no finite logit)
    int first;                     // M's first index
    unsigned floor;                // ordered bits of the lowest key kept so far
    unsigned prefix;               // the radix select's digits found so far
    unsigned long long remaining;  // what the radix select still looks for inside the prefix
    int done;                      // the token is written (greedy, refused): later passes skip the row
    unsigned arrivals;             // blocks of the row done with the current pass
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

template <class Row>
__device__ __forceinline__ void split_pass(const typename Row::Elem* x, long long* __restrict__ tokens,
                                           const float* __restrict__ temperatures, const int* __restrict__ top_ks,
                                           const float* __restrict__ top_ps, const float* __restrict__ min_ps,
                                           float temperature, int top_k, float top_p, float min_p, int n,
                                           long long x_stride, unsigned seed_lo, unsigned seed_hi,
                                           unsigned offset_lo, unsigned offset_hi, SplitState* states,
                                           unsigned long long* hist_part, float* key_part, int* index_part,
                                           int chunk_elems, int pass) {
    __shared__ SampleShared sh;
    __shared__ int last_flag;
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
        }
        return;
    }
    if (st.done) return;
    const float m = st.m;

    if (pass < PASS_SAMPLE) {   // one digit of a radix select (top-k: a count; top-p: a mass)
        const bool mass = pass >= PASS_TOP_P;
        const int k = top_ks ? top_ks[row] : top_k;
        const float p = top_ps ? top_ps[row] : top_p;
        if (mass ? !(p < 1.0f) : !(k > 0 && k < n)) return;
        const int shift = 24 - 8 * (pass - (mass ? PASS_TOP_P : PASS_TOP_K));
        const unsigned prefix = shift == 24 ? 0u : st.prefix;
        const unsigned mask = shift == 24 ? 0u : ~0u << (shift + 8);
        const unsigned floor = mass ? st.floor : 0u;
        for (int d = threadIdx.x; d < 256; d += blockDim.x) sh.hist[d] = 0;
        __syncthreads();
        for_each_chunk_token<Row>(row_x, start, length, t, [&](int, float s, bool valid) {
            const unsigned key = ordered_bits(s);
            const bool active = valid && key >= floor && (key & mask) == prefix;
            if (mass) warp_add<true>(sh.hist, active, (key >> shift) & 255, active ? fixed_weight(s, m) : 0ull);
            else warp_add<false>(sh.hist, active, (key >> shift) & 255, 0ull);
        });
        __syncthreads();
        unsigned long long* mine = hist_part + part * 256;
        for (int d = threadIdx.x; d < 256; d += blockDim.x) mine[d] = sh.hist[d];
        if (!arrive_last(&st.arrivals, n_chunks, &last_flag)) return;
        const unsigned long long* row_parts = hist_part + (part - chunk) * 256;
        for (int d = threadIdx.x; d < 256; d += blockDim.x) {
            unsigned long long sum = 0;
            for (int c = 0; c < n_chunks; ++c) sum += __ldcg(row_parts + c * 256 + d);
            sh.hist[d] = sum;
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            unsigned long long remaining = st.remaining;
            if (shift == 24 && !mass) remaining = static_cast<unsigned long long>(k);
            if (shift == 24 && mass) {   // the first digit sees every kept token: the target is p of their mass
                unsigned long long total = 0;
                for (int d = 0; d < 256; ++d) total += sh.hist[d];
                remaining = max(1ull, static_cast<unsigned long long>(ceil(static_cast<double>(p) * total)));
            }
            const int digit = pick_digit<unsigned long long>(sh.hist, remaining);
            if (threadIdx.x == 0) {
                const unsigned found = prefix | (static_cast<unsigned>(digit) << shift);
                st.prefix = found;
                st.remaining = remaining;
                if (shift == 0) st.floor = max(st.floor, found);   // the threshold: top-p's is within top-k's
            }
        }
        return;
    }

    // PASS_SAMPLE: Gumbel-max over the kept tokens (min-p's floor joins here)
    const float q = min_ps ? min_ps[row] : min_p;
    const unsigned floor = q > 0.0f ? max(st.floor, ordered_bits(m + logf(q))) : st.floor;
    GumbelKeys noise(row, offset_lo, offset_hi, seed_lo, seed_hi);
    float best = neg_inf();
    int pick = 0x7fffffff;
    for_each_chunk_token<Row>(row_x, start, length, t, [&](int j, float s, bool valid) {
        const float d = s - m;
        if (!valid || ordered_bits(s) < floor || !(d + GUMBEL_MAX > best)) return;
        const float key = noise.key(j, d);
        if (key > best) { best = key; pick = j; }
    });
    block_pick(best, pick, sh.keys, sh.indices);
    if (threadIdx.x == 0) { key_part[part] = best; index_part[part] = pick; }
    if (!arrive_last(&st.arrivals, n_chunks, &last_flag)) return;
    combine_picks(key_part + part - chunk, index_part + part - chunk, n_chunks, best, pick, sh);
    if (threadIdx.x == 0) tokens[row] = best == neg_inf() ? -1 : pick;
}

#define SPLIT_ARGS(ROW)                                                                                    \
    const ROW::Elem *__restrict__ x, long long *__restrict__ tokens, const float *__restrict__ temperatures, \
        const int *__restrict__ top_ks, const float *__restrict__ top_ps, const float *__restrict__ min_ps,  \
        float temperature, int top_k, float top_p, float min_p, int n, long long x_stride, unsigned seed_lo,  \
        unsigned seed_hi, unsigned offset_lo, unsigned offset_hi, SplitState *__restrict__ states,            \
        unsigned long long *__restrict__ hist_part, float *__restrict__ key_part, int *__restrict__ index_part, \
        int chunk_elems, int pass
#define SPLIT_CALL(ROW)                                                                                    \
    split_pass<ROW>(x, tokens, temperatures, top_ks, top_ps, min_ps, temperature, top_k, top_p, min_p, n,   \
                    x_stride, seed_lo, seed_hi, offset_lo, offset_hi, states, hist_part, key_part, index_part, \
                    chunk_elems, pass)

extern "C" __global__ void __launch_bounds__(1024) sampling_02_split_f32(SPLIT_ARGS(F32Row)) { SPLIT_CALL(F32Row); }

extern "C" __global__ void __launch_bounds__(1024) sampling_02_split_f16(SPLIT_ARGS(F16Row)) { SPLIT_CALL(F16Row); }

extern "C" __global__ void __launch_bounds__(1024) sampling_02_split_bf16(SPLIT_ARGS(BF16Row)) { SPLIT_CALL(BF16Row); }
