// sampling_bins.cuh — a row's thresholds without a sort, from a histogram of 2048 bins of d = s - M:
// the bin where a count or a weight from the top is reached (pick_bin), that bin's tokens gathered
// (gather_bin, Candidates), the exact key among them or among the whole row's tokens by a radix select
// (radix_select, RowTokens), and the draw of top-p's pending bin once gathered (draw_pending). Used by
// sampling_01_rows (a block per row) and sampling_02_split (a row's chunks over blocks); the
// definitions are in sampling_01_rows.cu's header.
#pragma once
#include "sampling_select.cuh"

// The bins: d = s - M in (-inf, 0] cut into BINS - 1 bins of width
// 1 / INVERSE_BIN_WIDTH from the top, then a last bin for everything lower. -d * INVERSE_BIN_WIDTH
// rounds and truncates monotonically, so a larger s never lands in a later bin. The last bin starts
// below -22.2, where e^d 2^32 < 1: its tokens weigh 0 in fixed point.
#define BINS 2048
#define CANDIDATES 2048
#define INVERSE_BIN_WIDTH 92.0f   // (BINS - 1) / 92 = 22.25 > 32 ln 2 = 22.18

__device__ __forceinline__ int bin_of(float d) {
    return static_cast<int>(fminf(-d * INVERSE_BIN_WIDTH, static_cast<float>(BINS - 1)));
}

struct BinShared {
    unsigned long long mass[BINS];   // per bin: the tokens' weights (fixed point), exact integer sums
    unsigned count[BINS];            // per bin: the tokens
    float s[CANDIDATES];             // a bin's tokens, gathered: s and index
    int index[CANDIDATES];
    unsigned n_candidates;
    unsigned long long total, remaining;        // a candidates' sum; pick_bin's answer to all threads
    unsigned long long pending_remaining;       // for draw_pending: top-p's weight left in the pending bin,
    unsigned floor;                             // and the floor top-k set
    int bin;
};

// All threads: the first bin, from the top, at which the running sum of hist reaches `remaining`, or,
// when remaining is 0, ceil(p * the sum of every bin) (at least 1); `remaining` becomes what is left
// inside that bin. Warp 0 scans (lane l sums bins 64 l .. 64 l + 63), then every thread reads it.
template <class T>
__device__ int pick_bin(const T* hist, unsigned long long& remaining, float p, BinShared& bs) {
    constexpr int PER_LANE = BINS / 32;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        unsigned long long part = 0ull;
        for (int q = 0; q < PER_LANE; ++q) part += hist[PER_LANE * lane + q];
        unsigned long long inclusive = part;
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
            const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (lane >= offset) inclusive += other;
        }
        unsigned long long target = remaining;
        if (target == 0ull) {
            const unsigned long long total = __shfl_sync(0xffffffffu, inclusive, 31);
            target = max(1ull, static_cast<unsigned long long>(ceil(static_cast<double>(p) * total)));
        }
        const unsigned hit = __ballot_sync(0xffffffffu, inclusive >= target);
        const int owner = __ffs(hit) - 1;   // target <= the total: some lane reaches it
        if (lane == owner) {
            unsigned long long left = target - (inclusive - part);
            int b = PER_LANE * lane;
            for (; b < PER_LANE * lane + PER_LANE - 1; ++b) {
                if (hist[b] >= left) break;
                left -= hist[b];
            }
            bs.bin = b;
            bs.remaining = left;
        }
    }
    __syncthreads();
    const int bin = bs.bin;
    remaining = bs.remaining;
    __syncthreads();   // bs.bin may be written again right after
    return bin;
}

// All threads: the tokens of bin `bin` into bs.s / bs.index (the caller knows they fit).
template <class Row>
__device__ void gather_bin(const typename Row::Elem* row_x, int n, float t, float m, int bin, BinShared& bs) {
    if (threadIdx.x == 0) bs.n_candidates = 0u;
    __syncthreads();
    for_each_token<Row>(row_x, n, t, [&](int j, float s, bool valid) {
        if (!valid || bin_of(s - m) != bin) return;
        const unsigned slot = atomicAdd(&bs.n_candidates, 1u);
        bs.s[slot] = s;
        bs.index[slot] = j;
    });
    __syncthreads();
}

// What radix_select visits: every token of the row, or the tokens gathered in shared memory.
template <class Row>
struct RowTokens {
    const typename Row::Elem* row_x;
    int n;
    float t;
    template <class Visit>
    __device__ __forceinline__ void operator()(Visit visit) const { for_each_token<Row>(row_x, n, t, visit); }
};

struct Candidates {
    const BinShared& bs;
    template <class Visit>
    __device__ __forceinline__ void operator()(Visit visit) const {   // all 32 lanes of a warp together
        const int lane = threadIdx.x & 31, count = static_cast<int>(bs.n_candidates);
        for (int base = threadIdx.x & ~31; base < count; base += blockDim.x) {
            const int i = base + lane;
            const bool valid = i < count;
            visit(valid ? bs.index[i] : 0, valid ? bs.s[i] : 0.0f, valid);
        }
    }
};

// The exact threshold key of a radix select over the tokens `each` visits whose key is >= floor: the
// count-th largest (MASS = false), or the largest key whose tokens at or above it weigh `count` units
// (MASS = true and count given) or p of all of them (MASS = true, count == 0; weights in fixed point).
// Four passes over the tokens, eight bits each; `each(visit)` calls visit(j, s, valid) on every token,
// all 32 lanes of a warp together.
template <bool MASS, class Each>
__device__ unsigned radix_select(Each each, float m, unsigned floor, unsigned long long count, float p,
                                 SampleShared& sh) {
    unsigned prefix = 0, mask = 0;
    unsigned long long remaining = count;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x) sh.hist[d] = 0;
        __syncthreads();
        each([&](int, float s, bool valid) {
            const unsigned key = ordered_bits(s);
            const bool active = valid && key >= floor && (key & mask) == prefix;
            warp_add<MASS>(sh.hist, active, (key >> shift) & 255, MASS && active ? fixed_weight(s, m) : 0ull);
        });
        __syncthreads();
        if (threadIdx.x < 32) {
            if (MASS && count == 0 && shift == 24) {   // the first pass sums every kept token: the target is p of that
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

struct Pick {
    float key;
    int index;
};

// After a pass gathered top-p's pending bin: top-p's key among its tokens, then the draw of those at
// or above it (and at or above `kept`), against this thread's best so far.
__device__ __forceinline__ Pick draw_candidates(const BinShared& bs, SampleShared& sh, float m, unsigned floor,
                                                unsigned kept, unsigned long long remaining, Pick best,
                                                GumbelKeys noise) {
    const unsigned last = max(kept, radix_select<true>(Candidates{bs}, m, floor, remaining, 0.0f, sh));
    for (int i = threadIdx.x; i < static_cast<int>(bs.n_candidates); i += blockDim.x) {
        const float s = bs.s[i], d = s - m;
        if (ordered_bits(s) < last || !(d + GUMBEL_MAX > best.key)) continue;
        const float key = noise.key(bs.index[i], d);
        if (beats(key, bs.index[i], best.key, best.index)) best = Pick{key, bs.index[i]};
    }
    return best;
}

// draw_candidates, not inlined: for a caller whose loop holds its registers.
__device__ __noinline__ Pick draw_pending(const BinShared& bs, SampleShared& sh, float m, unsigned floor,
                                          unsigned kept, unsigned long long remaining, Pick best, GumbelKeys noise) {
    return draw_candidates(bs, sh, m, floor, kept, remaining, best, noise);
}
