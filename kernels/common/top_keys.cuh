// top_keys.cuh — the top-k order as one 64-bit integer per element, and the selections built on it:
// a sorted list of the K best kept in registers, the block-wide merge of those lists, the
// threshold a block shares while it reads, and a radix select over keys a block holds on chip.
//
// Key:   (order bits of the value) << 32 | ~column. The order bits map a float to an unsigned
//        integer that sorts as the float does (a positive float gets its sign bit set, a negative
//        one all its bits flipped); every NaN maps to 0xffffffff (above +inf, as torch.topk ranks
//        NaN) and -0.0 to the bits of +0.0 (equal logits). The low word ~column makes the lower
//        column the larger key among equal values, so "larger key" is the book's order (larger
//        value first, equal values by the lower column) and no two elements of a row share a key.
//        Real keys are never 0 (~column >= 2^31 for a column < 2^31): key 0 is "no element".
// Lists: K keys, best first, empty slots 0 (K a compile-time constant: every loop unrolls, the
//        list is 2K registers, no stack).
// Used by the softmax_topk kernels (kernels/topk/); the NumPy models in
// onlinesoftmax/kernels/topk/keys.py build the same keys bit for bit.
#pragma once
#include "numeric.cuh"

typedef unsigned long long TopKey;
#define TOP_FULL_MASK 0xffffffffu

__device__ __forceinline__ unsigned int order_bits(float v) {
    unsigned int u = __float_as_uint(v);
    if (v != v) return 0xffffffffu;      // every NaN: above +inf
    if (u == 0x80000000u) u = 0u;        // -0.0 ranks as +0.0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float order_value(unsigned int o) {
    if (o == 0xffffffffu) return __int_as_float(0x7fffffff);
    return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

__device__ __forceinline__ TopKey top_key(float v, int column) {
    return (static_cast<TopKey>(order_bits(v)) << 32) | static_cast<unsigned int>(~column);
}
__device__ __forceinline__ float key_value(TopKey key) { return order_value(static_cast<unsigned int>(key >> 32)); }
__device__ __forceinline__ int key_column(TopKey key) { return static_cast<int>(~static_cast<unsigned int>(key)); }
__device__ __forceinline__ TopKey key_max(TopKey a, TopKey b) { return a > b ? a : b; }

template <int K>
struct KeyList {   // sorted, best first; empty slots hold 0 and rank last
    TopKey key[K];
    __device__ __forceinline__ void clear() {
#pragma unroll
        for (int i = 0; i < K; ++i) key[i] = 0ull;
    }
    // Insert x when it beats the last entry: a chain of compare-and-swap steps down the list (no
    // early exit, so it unrolls into straight-line code and stays in registers).
    __device__ __forceinline__ void push(TopKey x) {
        if (x <= key[K - 1]) return;
#pragma unroll
        for (int i = 0; i < K; ++i) {
            const TopKey here = key[i];
            key[i] = key_max(x, here);
            x = x > here ? here : x;
        }
    }
    __device__ __forceinline__ void pop() {
#pragma unroll
        for (int i = 0; i < K - 1; ++i) key[i] = key[i + 1];
        key[K - 1] = 0ull;
    }
};

// The largest key in the warp (a butterfly: every lane ends with it).
__device__ __forceinline__ TopKey warp_max_key(TopKey x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = key_max(x, __shfl_xor_sync(TOP_FULL_MASK, x, offset));
    return x;
}

// The k-th largest of the warp's 32 keys (0 when fewer than k are nonzero), in every lane: a
// bitonic sort across the lanes, best first, then lane k - 1's key.
__device__ __forceinline__ TopKey warp_kth_key(TopKey x, int k) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            const TopKey other = __shfl_xor_sync(TOP_FULL_MASK, x, stride);
            const bool descending = (lane & size) == 0, lower = (lane & stride) == 0;
            x = (lower == descending) ? key_max(x, other) : (x < other ? x : other);
        }
    }
    return __shfl_sync(TOP_FULL_MASK, x, k - 1);
}

// The threshold a block shares while it reads a row (k <= 32): the largest of the warps' k-th best
// list heads. The k best of a warp's 32 heads are k elements of the row at or above the k-th of
// them, so the row's k-th best is at or above it too, and an element below it can never be among
// the row's k: it need not enter a list. Any value read, however stale, is such a lower bound, so
// the warps publish and read it with atomicMax and no barrier. Called by all 32 lanes of a warp
// (a warp-uniform loop) after a step in which `pushed` says whether this lane pushed (the heads
// change only then); thr / thr_value are the lane's copy.
template <int K>
__device__ __forceinline__ void share_threshold(const KeyList<K>& list, int k, bool pushed, TopKey* threshold,
                                                TopKey& thr, float& thr_value) {
    TopKey best = 0ull;
    if (__any_sync(TOP_FULL_MASK, pushed)) best = warp_kth_key(list.key[0], k);
    if ((threadIdx.x & 31) == 0) best = key_max(best, atomicMax(threshold, best));   // publish and read
    best = __shfl_sync(TOP_FULL_MASK, best, 0);
    if (best > thr) {
        thr = best;
        thr_value = key_value(best);
    }
}

// The block's k best keys from every thread's list (k <= K <= 32), by rounds of argmax without a
// sort: each warp takes its 32 list heads k times (the winner pops its head) into scratch
// (n_warps * k keys), then warp 0 merges the warps' sorted lists the same way. Returns, in warp 0,
// the r-th best key in lane r < k (0 elsewhere). Every thread of the block must call it.
template <int K>
__device__ __forceinline__ TopKey block_top_keys(KeyList<K>& list, int k, TopKey* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    for (int round = 0; round < k; ++round) {
        const TopKey best = warp_max_key(list.key[0]);
        if (best != 0ull && list.key[0] == best) list.pop();   // keys are unique: one lane pops
        if (lane == 0) scratch[warp * k + round] = best;
    }
    __syncthreads();
    TopKey mine = 0ull;
    if (warp == 0) {
        int taken = 0;
        TopKey head = lane < n_warps ? scratch[lane * k] : 0ull;
        for (int round = 0; round < k; ++round) {
            const TopKey best = warp_max_key(head);
            if (best != 0ull && head == best) {
                ++taken;
                head = taken < k ? scratch[lane * k + taken] : 0ull;
            }
            if (lane == round) mine = best;
        }
    }
    return mine;
}

// ---- radix select over keys the block holds on chip --------------------------------------------

struct RadixScratch {
    unsigned int histogram[256];
    TopKey prefix;       // the digits of the k-th key found so far
    TopKey threshold;    // the answer (see block_kth_key)
    int remaining;       // its rank among the keys that share `prefix`
    int done;
    int count;           // the gather's counter
};

// The keys a thread holds are given as a functor: keys(f) calls f(key) for each of the thread's
// keys (none of them 0). Functors, not lambdas: NVRTC's JIT mode takes no unannotated lambda.
struct RadixCount {   // f of a histogram pass: count the digit of the keys that share the prefix
    RadixScratch* sh;
    TopKey mask, prefix;
    int shift;
    __device__ __forceinline__ void operator()(TopKey key) const {
        if ((key & mask) == prefix) atomicAdd(&sh->histogram[(key >> shift) & 255u], 1u);
    }
};

struct RadixGather {  // f of the gather: keys at or above the threshold go to out[0 .. k-1]
    RadixScratch* sh;
    TopKey threshold;
    TopKey* out;
    int k;
    __device__ __forceinline__ void operator()(TopKey key) const {
        if (key >= threshold) {
            const int at = atomicAdd(&sh->count, 1);
            if (at < k) out[at] = key;
        }
    }
};

// A threshold with exactly min(k, keys) of the block's keys at or above it: the leading digits
// of the k-th largest key followed by zeros, or 0 when the block holds at most k keys. Eight-bit
// digits from the top, one pass per digit: a histogram of the digit over the keys that share the
// prefix found so far, then warp 0 finds the digit bucket that holds the k-th key. The search
// stops as soon as that bucket holds exactly the keys still needed (all of them are in, every key
// below the bucket is out). Every thread of the block must call it.
template <class Keys>
__device__ __forceinline__ TopKey block_kth_key(const Keys& keys, int k, RadixScratch* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (threadIdx.x == 0) {
        sh->prefix = 0ull; sh->threshold = 0ull; sh->remaining = k; sh->done = 0; sh->count = 0;
    }
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) sh->histogram[i] = 0u;
        __syncthreads();
        const TopKey mask = shift == 56 ? 0ull : (~0ull << (shift + 8));
        const TopKey prefix = sh->prefix;
        keys(RadixCount{sh, mask, prefix, shift});
        __syncthreads();
        if (warp == 0) {
            const unsigned int remaining = static_cast<unsigned int>(sh->remaining);
            unsigned int c[8], lane_total = 0u;   // lane l holds digits 255 - 8 l down to 248 - 8 l
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                c[j] = sh->histogram[255 - 8 * lane - j];
                lane_total += c[j];
            }
            unsigned int through = lane_total;    // keys in this lane's digits and all larger ones
#pragma unroll
            for (int offset = 1; offset < 32; offset <<= 1) {
                const unsigned int t = __shfl_up_sync(TOP_FULL_MASK, through, offset);
                if (lane >= offset) through += t;
            }
            const unsigned int total = __shfl_sync(TOP_FULL_MASK, through, 31);
            const unsigned int above_lane = through - lane_total;
            if (shift == 56 && total <= remaining) {
                if (lane == 0) { sh->threshold = 0ull; sh->done = 1; }   // at most k keys: take all
            } else if (above_lane < remaining && remaining <= through) {  // exactly one lane
                unsigned int above = above_lane, bucket = 0u;
                int digit = 0;
                bool found = false;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    if (!found && above + c[j] >= remaining) {
                        found = true;
                        digit = 255 - 8 * lane - j;
                        bucket = c[j];
                    } else if (!found) {
                        above += c[j];
                    }
                }
                const TopKey prefix_new = prefix | (static_cast<TopKey>(digit) << shift);
                const unsigned int left = remaining - above;
                sh->prefix = prefix_new;
                sh->remaining = static_cast<int>(left);
                if (bucket == left || shift == 0) { sh->threshold = prefix_new; sh->done = 1; }
            }
        }
        __syncthreads();
        if (sh->done) break;
    }
    return sh->threshold;
}

// The keys at or above `threshold` (block_kth_key's) into out[0 .. min(k, keys) - 1], in no order;
// afterwards (behind the barrier) sh->count says how many there were.
template <class Keys>
__device__ __forceinline__ void block_gather_keys(const Keys& keys, TopKey threshold, int k, RadixScratch* sh,
                                                  TopKey* out) {
    keys(RadixGather{sh, threshold, out, k});
    __syncthreads();
}

// Sort k distinct keys (k <= 1024) best first by rank: a key's place is the number of keys above it.
__device__ __forceinline__ void block_rank_sort(const TopKey* __restrict__ keys, int k, TopKey* __restrict__ sorted) {
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        const TopKey mine = keys[i];
        int rank = 0;
        for (int j = 0; j < k; ++j) rank += keys[j] > mine;
        sorted[rank] = mine;
    }
}
