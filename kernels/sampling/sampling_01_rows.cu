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
// g_j < GUMBEL_MAX, so a token whose s_j - M + GUMBEL_MAX is not above a thread's best key cannot
// win and draws no noise. The thresholds are exact values of the row: a radix select over the
// order-preserving bits of s, eight bits per pass, counting tokens (top-k) or summing weights
// (top-p) in shared-memory histograms of 64-bit integers, one atomic per distinct digit among a warp's lanes
// (warp_add): every sum is exact, so the thresholds, and
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
// Traffic: x read once to find M, four more times per radix select (top-k, top-p), once to sample:
//          one read for greedy rows, two without filters or with min-p, six with top-k or top-p,
//          ten with both (the later reads from L2 while the rows in flight fit in it). 8 bytes
//          written per row.
// Limits:  1 <= n <= 2^31 - 2^16; x float32, float16 or bfloat16, rows strided (unit column
//          stride); top_p in (0, 1], min_p in [0, 1], temperature >= 0 (the host checks them).
#include "sampling_select.cuh"

// The exact threshold key of a radix select over the tokens whose key is >= floor: the k-th largest
// (MASS = false, `count` = k), or the largest key whose tokens at or above it weigh at least p of
// all of them (MASS = true, weights in fixed point). Four passes over the row, eight bits each.
template <class Row, bool MASS>
__device__ unsigned radix_select(const typename Row::Elem* row_x, int n, float t, float m, unsigned floor,
                                 unsigned count, float p, SampleShared& sh) {
    unsigned prefix = 0, mask = 0;
    unsigned long long remaining = count;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x) sh.hist[d] = 0;
        __syncthreads();
        for_each_token<Row>(row_x, n, t, [&](int, float s, bool valid) {
            const unsigned key = ordered_bits(s);
            const bool active = valid && key >= floor && (key & mask) == prefix;
            warp_add<MASS>(sh.hist, active, (key >> shift) & 255, MASS && active ? fixed_weight(s, m) : 0ull);
        });
        __syncthreads();
        if (threadIdx.x < 32) {
            if (MASS && shift == 24) {   // the first pass sums every kept token: the target is p of that
                unsigned long long total = 0;
                for (int d = 0; d < 256; ++d) total += sh.hist[d];
                remaining = max(1ull, static_cast<unsigned long long>(ceil(static_cast<double>(p) * total)));
            }
            const int digit = pick_digit<unsigned long long>(sh.hist, remaining);
            if (threadIdx.x == 0) sh.prefix = prefix | (static_cast<unsigned>(digit) << shift);
        }
        __syncthreads();
        prefix = sh.prefix;
        mask |= 255u << shift;
        __syncthreads();
    }
    return prefix;
}

template <class Row>
__device__ __forceinline__ void sample_row(const typename Row::Elem* x, long long* __restrict__ tokens,
                                           const float* __restrict__ temperatures, const int* __restrict__ top_ks,
                                           const float* __restrict__ top_ps, const float* __restrict__ min_ps,
                                           float temperature, int top_k, float top_p, float min_p, int n,
                                           long long x_stride, unsigned seed_lo, unsigned seed_hi,
                                           unsigned offset_lo, unsigned offset_hi) {
    __shared__ SampleShared sh;
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

    // the filters: a floor on the ordered bits of s
    const int k = top_ks ? top_ks[row] : top_k;
    const float p = top_ps ? top_ps[row] : top_p;
    const float q = min_ps ? min_ps[row] : min_p;
    unsigned floor = 0;
    if (k > 0 && k < n) floor = radix_select<Row, false>(row_x, n, t, m, 0u, static_cast<unsigned>(k), 0.0f, sh);
    if (p < 1.0f) floor = max(floor, radix_select<Row, true>(row_x, n, t, m, floor, 0u, p, sh));
    if (q > 0.0f) floor = max(floor, ordered_bits(m + logf(q)));

    // the last pass: Gumbel-max over the kept tokens; token j's noise is word j % 4 of the Philox draw
    // of group j / 4, drawn only for a token that could still beat this thread's best
    GumbelKeys noise(row, offset_lo, offset_hi, seed_lo, seed_hi);
    float best = neg_inf();
    int pick = 0x7fffffff;
    for_each_token<Row>(row_x, n, t, [&](int j, float s, bool valid) {
        const float d = s - m;
        if (!valid || ordered_bits(s) < floor || !(d + GUMBEL_MAX > best)) return;
        const float key = noise.key(j, d);
        if (key > best) { best = key; pick = j; }
    });
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
