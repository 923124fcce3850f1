// sampling_select.cuh — the pieces of a sampler that never sort: order-preserving keys, the block's
// best (key, index), the radix digit that holds a count or a mass, a token's weight in fixed point,
// a warp's histogram adds, and the visit of a row's tokens in 16-byte vectors. Used by
// sampling_01_rows (a block per row) and sampling_02_split (a row's chunks over blocks); the
// definitions of keys, weights and thresholds are in sampling_01_rows.cu's header.
#pragma once
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

// *target += value in shared memory as native 32-bit adds: a 64-bit shared-memory atomicAdd compiles
// to a compare-and-swap loop (ATOMS.CAST.SPIN.64), retried by every lane that meets another on one
// address. The low word's add returns the word before it, so its carry is known exactly and goes to
// the high word with the value's own high bits: once every add is done (read after a barrier), the
// two words hold the exact 64-bit sum.
__device__ __forceinline__ void shared_add_u64(unsigned long long* target, unsigned long long value) {
    unsigned* word = reinterpret_cast<unsigned*>(target);   // little-endian: the low word first
    const unsigned lo = static_cast<unsigned>(value), hi = static_cast<unsigned>(value >> 32);
    const unsigned before = lo != 0u ? atomicAdd(word, lo) : 0u;
    const unsigned carry = before > 0xffffffffu - lo ? 1u : 0u;   // the low word wrapped
    if (hi + carry != 0u) atomicAdd(word + 1, hi + carry);
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
            if (active) shared_add_u64(&hist[digit], MASS ? weight : 1ull);
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
        if (lane == leader) shared_add_u64(&hist[d], sum);
        active = active && !mine;
        todo &= ~group;
    }
}

// Visit every token of a row as visit(j, s_j, valid), each thread its tokens in increasing j: the
// scalar head up to the row's first 16-byte boundary, one 16-byte vector per lane and step, the scalar
// tail. Every step is run by all 32 lanes of a warp (valid is false past the row), so visit may use
// warp-wide operations; blockDim must be a multiple of 32. s_j = x_j / t; at t = 1 (the most common
// temperature) x_j itself, which the division would return exactly, without the division's cost.
template <class Row, class Visit>
__device__ __forceinline__ void for_each_token(const typename Row::Elem* row_x, int n, float t, Visit visit) {
    constexpr int VEC = Row::VEC;
    const RowSplit split = row_split<Row>(row_x, n);
    const int lane = threadIdx.x & 31, warp_first = threadIdx.x & ~31, step = blockDim.x;
    const bool unit = t == 1.0f;
    auto scaled = [unit, t](float v) { return unit ? v : v / t; };
    for (int base = warp_first; base < split.head; base += step) {
        const int j = base + lane;
        const bool valid = j < split.head;
        visit(j, valid ? scaled(Row::load1(row_x + j)) : 0.0f, valid);
    }
    const typename Row::Vec* vec = reinterpret_cast<const typename Row::Vec*>(row_x + split.head);
    for (int base = warp_first; base < split.n_vec; base += step) {
        const int v = base + lane;
        const bool valid = v < split.n_vec;
        float f[VEC];
        if (valid) Row::unpack(vec[v], f);
#pragma unroll
        for (int e = 0; e < VEC; ++e) visit(split.head + v * VEC + e, valid ? scaled(f[e]) : 0.0f, valid);
    }
    for (int base = split.tail + warp_first; base < n; base += step) {
        const int j = base + lane;
        const bool valid = j < n;
        visit(j, valid ? scaled(Row::load1(row_x + j)) : 0.0f, valid);
    }
}

// Token j's key in the Gumbel-max draw, d = s_j - M plus its noise: word j % 4 of the Philox draw of
// group j / 4 for this row, offset and seed. A thread visits its tokens in increasing j, so it keeps
// the last group's four words: neighbours in one group draw Philox4x32-10 once, not once each.
struct GumbelKeys {
    int row;
    unsigned offset_lo, offset_hi, seed_lo, seed_hi;
    unsigned group;
    PhiloxWords words;

    __device__ __forceinline__ GumbelKeys(int row_, unsigned offset_lo_, unsigned offset_hi_, unsigned seed_lo_,
                                          unsigned seed_hi_)
        : row(row_), offset_lo(offset_lo_), offset_hi(offset_hi_), seed_lo(seed_lo_), seed_hi(seed_hi_),
          group(0xffffffffu), words() {}

    // Philox4x32-10 for token j's group, unless this thread holds it already.
    __device__ __forceinline__ void load(int j) {
        const unsigned g = static_cast<unsigned>(j) >> 2;
        if (g != group) {
            words = philox4x32_10(g, static_cast<unsigned>(row), offset_lo, offset_hi, seed_lo, seed_hi);
            group = g;
        }
    }

    __device__ __forceinline__ float key(int j, float d) {
        load(j);
        const unsigned word = (j & 2) ? ((j & 1) ? words.w[3] : words.w[2]) : ((j & 1) ? words.w[1] : words.w[0]);
        return d + gumbel_from_word(word);   // (word picked without indexing: no local array)
    }

    // Token j's key without the kept group (tokens drawn out of order, as GatheredDraws draws them):
    // Philox for j's group, nothing held between calls.
    __device__ __forceinline__ float fresh_key(int j, float d) const {
        const PhiloxWords w = philox4x32_10(static_cast<unsigned>(j) >> 2, static_cast<unsigned>(row), offset_lo,
                                            offset_hi, seed_lo, seed_hi);
        const unsigned word = (j & 2) ? ((j & 1) ? w.w[3] : w.w[2]) : ((j & 1) ? w.w[1] : w.w[0]);
        return d + gumbel_from_word(word);
    }

    // Called by all 32 lanes of a warp: every lane loads its token's group when any lane will draw
    // (lanes that each decide alone split the warp, which then runs Philox once per subset of lanes).
    __device__ __forceinline__ void draw_group(int j, bool draws) {
        if (__any_sync(0xffffffffu, draws)) load(j);
    }
};

struct SampleShared {
    unsigned long long hist[256];
    float keys[32];
    int indices[32];
    unsigned prefix;
    unsigned draw_bound;   // the draw: the ordered bits of the best key drawn in the block so far
};
