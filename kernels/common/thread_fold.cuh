// thread_fold.cuh — how one thread of a block-per-row kernel folds its strided slice of a row:
// in short chunks, each into a fresh state, and the chunks' states merged pairwise.
// Used by softmax_01_safe (its sum), softmax_02_online and softmax_03_online_masked; never pasted.
//
// Thread t owns columns t, t + T, t + 2T, ... (T = blockDim.x: loads stay coalesced). Folding
// them one after the other into one running value is a chain of N / T dependent roundings
// (4096 at N = 2^20), and on a peaked row the thread that holds the peak adds thousands of tiny
// terms to a value near 1, each rounded away in part. Here chunk c of thread t is its
// THREAD_FOLD_CHUNK columns t + (c * CHUNK + k) * T, k = 0 .. CHUNK-1; each chunk is folded
// into a fresh state, and the chunks' states meet as the leaves of a binary tree (a binary
// counter: level k holds the merge of 2^k chunks while bit k of the count is set). A value now
// passes through at most CHUNK pushes and about log2(N / (CHUNK T)) merges. Every thread runs
// the same number of chunks, ceil(N / (CHUNK T)); a chunk past the row's end is the identity,
// which merges exactly (bit for bit). Above 2^(LEVELS-1) = 128 chunks (N > 128 * 16 * T, 2^19
// columns at T = 256) the top level merges groups of 128 chunks one after the other: a row of
// 2^20 columns has two such groups. LEVELS states cost 2 * LEVELS registers in an online kernel.
//
// Order, for the NumPy models (onlinesoftmax/simulate.py, thread_fold): chunk c's columns in
// increasing k; a new chunk's state s becomes merge(level[k], s) for every set bit k from the
// bottom, then lands on the first clear level; at the end the levels are merged from the top
// (oldest) down, the first present one taken as it is.
//
// Build with -DTHREAD_FOLD_SEQUENTIAL=1 for the previous schedule: one running value, every
// column pushed into it in turn (the book's before/after comparison).
#pragma once

#ifndef THREAD_FOLD_SEQUENTIAL
#define THREAD_FOLD_SEQUENTIAL 0
#endif
#define THREAD_FOLD_CHUNK 16
#define THREAD_FOLD_LEVELS 8

// The fold of this thread's columns: `load(j)` reads column j (as the float the kernel folds),
// `push(state, v)` folds a value into a state, `merge(a, b)` merges two states (a holds the
// earlier columns), `identity` is the empty state. A whole chunk issues its CHUNK loads before its
// first push, so they are in flight together (one push waits on the one before: a load behind each
// push would wait a memory latency per element); only the row's last chunk is guarded column by column.
template <class State, class Load, class Push, class Merge>
__device__ __forceinline__ State thread_fold(int n_cols, State identity, Load load, Push push, Merge merge) {
    const int step = blockDim.x;
#if THREAD_FOLD_SEQUENTIAL
    State s = identity;
    for (int j = threadIdx.x; j < n_cols; j += step) push(s, load(j));
    return s;
#else
    const int chunk_cols = THREAD_FOLD_CHUNK * step;  // columns one chunk spans, all threads together
    const int n_chunks = (n_cols + chunk_cols - 1) / chunk_cols;
    State level[THREAD_FOLD_LEVELS];
    for (int c = 0; c < n_chunks; ++c) {
        State s = identity;  // a fresh state for every chunk
        const int first = c * chunk_cols + threadIdx.x;
        if (first + (THREAD_FOLD_CHUNK - 1) * step < n_cols) {  // the whole chunk is in the row
            float v[THREAD_FOLD_CHUNK];
#pragma unroll
            for (int k = 0; k < THREAD_FOLD_CHUNK; ++k) v[k] = load(first + k * step);
#pragma unroll
            for (int k = 0; k < THREAD_FOLD_CHUNK; ++k) push(s, v[k]);
        } else {
#pragma unroll
            for (int k = 0; k < THREAD_FOLD_CHUNK; ++k) {
                const int j = first + k * step;
                if (j < n_cols) push(s, load(j));
            }
        }
    // binary carry: merge with every occupied level from the bottom, land on the first free one
        bool carrying = true;
#pragma unroll
        for (int k = 0; k < THREAD_FOLD_LEVELS; ++k) {
            const bool top = k == THREAD_FOLD_LEVELS - 1;
            const bool occupied = top ? (c >> k) != 0 : ((c >> k) & 1) != 0;
            if (carrying && occupied) s = merge(level[k], s);
            if (carrying && (!occupied || top)) {
                level[k] = s;
                carrying = false;
            }
        }
    }
    // the levels present in n_chunks, oldest (highest) first
    State total = identity;
    bool empty = true;
#pragma unroll
    for (int k = THREAD_FOLD_LEVELS - 1; k >= 0; --k) {
        const bool present = k == THREAD_FOLD_LEVELS - 1 ? (n_chunks >> k) != 0 : ((n_chunks >> k) & 1) != 0;
        if (present) {
            total = empty ? level[k] : merge(total, level[k]);
            empty = false;
        }
    }
    return total;
#endif
}
