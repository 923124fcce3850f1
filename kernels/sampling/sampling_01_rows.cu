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
#include "online_rows.cuh"
#include "philox.cuh"

#define SAMPLING_GREEDY_BELOW 1e-5f

// The order-preserving bits of a float: a < b exactly when ordered(a) < ordered(b) (no NaN here);
// -0 is taken as +0, so that the two zeros, equal as floats, are one key.
__device__ __forceinline__ unsigned ordered_bits(float s) {
    const unsigned b = __float_as_uint(s == 0.0f ? 0.0f : s);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// (key, index) with the larger key, the lower index on a tie; 32 scratch pairs in shared memory.
__device__ __forceinline__ bool beats(float key, int index, float other_key, int other_index) {
    return key > other_key || (key == other_key && index < other_index);
}

__device__ __forceinline__ void block_pick(float& key, int& index, float* keys, int* indices) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float k = __shfl_xor_sync(0xffffffffu, key, offset);
        const int i = __shfl_xor_sync(0xffffffffu, index, offset);
        if (beats(k, i, key, index)) { key = k; index = i; }
    }
    if (lane == 0) { keys[warp] = key; indices[warp] = index; }
    __syncthreads();
    if (warp == 0) {
        key = lane < n_warps ? keys[lane] : neg_inf();
        index = lane < n_warps ? indices[lane] : 0x7fffffff;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float k = __shfl_xor_sync(0xffffffffu, key, offset);
            const int i = __shfl_xor_sync(0xffffffffu, index, offset);
            if (beats(k, i, key, index)) { key = k; index = i; }
        }
        if (lane == 0) { keys[0] = key; indices[0] = index; }
    }
    __syncthreads();
    key = keys[0];
    index = indices[0];
    __syncthreads();   // the scratch may be written again right after
}

// Warp 0: the digit (255 .. 0, from the top) whose bucket holds the `remaining`-th unit counted from
// the largest keys down, and what remains of it inside that bucket. Lane l sums buckets 255 - 8l
// down to 248 - 8l; a scan across lanes finds the lane, the lane its bucket. The units are integers
// (tokens, or weights in fixed point), so every sum is exact in any order and the lane's own walk
// always ends in its range.
template <class T>
__device__ __forceinline__ int pick_digit(const T* hist, T& remaining) {
    const int lane = threadIdx.x & 31;
    T part = 0;
#pragma unroll
    for (int q = 0; q < 8; ++q) part += hist[255 - 8 * lane - q];
    T inclusive = part;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const T other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
    }
    const unsigned hit = __ballot_sync(0xffffffffu, inclusive >= remaining);
    const int owner = __ffs(hit) - 1;   // remaining <= the total: some lane reaches it
    int digit = 0;
    T left = remaining - (inclusive - part);
    if (lane == owner) {
        for (int q = 0; q < 8; ++q) {
            const int d = 255 - 8 * lane - q;
            if (hist[d] >= left) { digit = d; break; }
            left -= hist[d];
        }
    }
    remaining = __shfl_sync(0xffffffffu, left, owner);
    return __shfl_sync(0xffffffffu, digit, owner);
}

// A token's weight e^(s - M) in (0, 1] as an integer of 2^-32 units (truncated): a row of up to 2^31
// tokens sums below 2^63, exactly, whatever order the threads add in.
__device__ __forceinline__ unsigned long long fixed_weight(float s, float m) {
    return static_cast<unsigned long long>(expf(s - m) * 4294967296.0f);
}

// hist[digit] += weight (1 when counting) for every lane of the warp whose `active` is set, with one
// shared-memory atomic per distinct digit among the warp's lanes rather than one per lane: the first
// passes put most of a row into a few buckets (logits share their top bits), and lanes of a warp adding
// to one address are serialised. The sums are of integers, so they are the same in any grouping. A
// weight is at most 2^32: its two 16-bit halves are summed over at most 32 lanes in 32 bits each.
// Up to four groups are gathered; lanes still left after them (a warp of scattered digits) add alone.
// Called by all 32 lanes of the warp (a warp-uniform loop).
template <bool MASS>
__device__ __forceinline__ void warp_add(unsigned long long* hist, bool active, unsigned digit,
                                         unsigned long long weight) {
    const int lane = threadIdx.x & 31;
    unsigned todo = __ballot_sync(0xffffffffu, active);
    for (int round = 0; todo != 0u; ++round) {   // todo is the same in every lane
        if (round == 4) {
            if (active) atomicAdd(&hist[digit], MASS ? weight : 1ull);
            return;
        }
        const int leader = __ffs(static_cast<int>(todo)) - 1;
        const unsigned d = __shfl_sync(0xffffffffu, digit, leader);
        const bool mine = active && digit == d;
        const unsigned group = __ballot_sync(0xffffffffu, mine);
        unsigned long long sum = static_cast<unsigned long long>(__popc(group));
        if (MASS) {
            const unsigned lo = __reduce_add_sync(0xffffffffu, mine ? static_cast<unsigned>(weight & 0xffffu) : 0u);
            const unsigned hi = __reduce_add_sync(0xffffffffu, mine ? static_cast<unsigned>(weight >> 16) : 0u);
            sum = (static_cast<unsigned long long>(hi) << 16) + lo;
        }
        if (lane == leader) atomicAdd(&hist[d], sum);
        active = active && !mine;
        todo &= ~group;
    }
}

// Visit every token of a row as visit(j, s_j, valid), each thread its tokens in increasing j: the
// scalar head up to the row's first 16-byte boundary, one 16-byte vector per lane and step, the scalar
// tail. Every step is run by all 32 lanes of a warp (valid is false past the row), so visit may use
// warp-wide operations; blockDim must be a multiple of 32.
template <class Row, class Visit>
__device__ __forceinline__ void for_each_token(const typename Row::Elem* row_x, int n, float t, Visit visit) {
    constexpr int VEC = Row::VEC;
    const RowSplit split = row_split<Row>(row_x, n);
    const int lane = threadIdx.x & 31, warp_first = threadIdx.x & ~31, step = blockDim.x;
    for (int base = warp_first; base < split.head; base += step) {
        const int j = base + lane;
        const bool valid = j < split.head;
        visit(j, valid ? Row::load1(row_x + j) / t : 0.0f, valid);
    }
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row_x + split.head);
    for (int base = warp_first; base < split.n_vec; base += step) {
        const int v = base + lane;
        const bool valid = v < split.n_vec;
        float f[VEC];
        if (valid) Row::unpack(vec[v], f);
#pragma unroll
        for (int e = 0; e < VEC; ++e) visit(split.head + v * VEC + e, valid ? f[e] / t : 0.0f, valid);
    }
    for (int base = split.tail + warp_first; base < n; base += step) {
        const int j = base + lane;
        const bool valid = j < n;
        visit(j, valid ? Row::load1(row_x + j) / t : 0.0f, valid);
    }
}

struct SampleShared {
    unsigned long long hist[256];
    float keys[32];
    int indices[32];
    unsigned prefix;
};

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
    float best = neg_inf();
    int pick = 0x7fffffff;
    for_each_token<Row>(row_x, n, t, [&](int j, float s, bool valid) {
        const float d = s - m;
        if (!valid || ordered_bits(s) < floor || !(d + GUMBEL_MAX > best)) return;
        const PhiloxWords r = philox4x32_10(static_cast<unsigned>(j >> 2), static_cast<unsigned>(row), offset_lo,
                                            offset_hi, seed_lo, seed_hi);
        const unsigned word = (j & 2) ? ((j & 1) ? r.w[3] : r.w[2]) : ((j & 1) ? r.w[1] : r.w[0]);   // no local array
        const float key = d + gumbel_from_word(word);
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
