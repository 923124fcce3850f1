// DELIBERATELY WRONG (m_init_zero): the running maximum starts at 0, not -inf
// tests/test_kernel_exercises.py asserts the grader rejects it.
// fix_attention_tail — made from the solution: the small attention kernel with its one bug fixed. The bug's symptom:
// right when the number of keys is a multiple of the tile (32), wrong (or NaN) otherwise.
// (see the starter, exercises/starters/). Graded by kernel_exercises.grade("fix_attention_tail").
//
// Attention for one head at a time, fp32, head dimension D = 64, no mask: o = softmax(q k^T * scale) v
// and lse = log sum_j e^(s_j), for q of shape (heads, n_q, D), k and v (heads, n_k, D), all contiguous.
// Launch: grid (ceil(n_q / 128), heads), block 128: thread t owns query row 128 * blockIdx.x + t
// (its q and its output accumulator in registers). The keys go through shared memory in tiles of
// TILE_K: the block loads a tile of K and of V, every thread folds the tile's keys into its
// (m, l, acc) state, FlashAttention-2's recurrence (acc divided by l once, at the end), and the
// block loads the next tile. Threads past n_q take part in the loads and barriers, and write nothing.
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)
#define D 64
#define BLOCK_Q 128
#define TILE_K 32

extern "C" __global__ void fix_attention_tail(const float* __restrict__ q, const float* __restrict__ k,
                                              const float* __restrict__ v, float* __restrict__ o,
                                              float* __restrict__ lse, int n_q, int n_k, float scale) {
    __shared__ float k_tile[TILE_K][D];
    __shared__ float v_tile[TILE_K][D];
    const long long head = blockIdx.y;
    const int row = blockIdx.x * BLOCK_Q + threadIdx.x;
    const bool has_row = row < n_q;
    const float* k_head = k + head * n_k * D;
    const float* v_head = v + head * n_k * D;
    float q_row[D], acc[D];
    for (int c = 0; c < D; ++c) {
        q_row[c] = has_row ? q[(head * n_q + row) * D + c] * scale : 0.0f;
        acc[c] = 0.0f;
    }
    float m = 0.0f, l = 0.0f;   // WRONG: the running max starts at 0
    for (int start = 0; start < n_k; start += TILE_K) {
        const int keys = min(TILE_K, n_k - start);          // the last tile may be partial
        for (int e = threadIdx.x; e < TILE_K * D; e += BLOCK_Q) {
            const int key = e / D, c = e % D;
            k_tile[key][c] = key < keys ? k_head[(long long)(start + key) * D + c] : 0.0f;
            v_tile[key][c] = key < keys ? v_head[(long long)(start + key) * D + c] : 0.0f;
        }
        __syncthreads();                                   // the tile is loaded
        for (int j = 0; j < keys; ++j) {
            float s = 0.0f;
            for (int c = 0; c < D; ++c) s += q_row[c] * k_tile[j][c];
            const float m_new = fmaxf(m, s);
            const float rescale = expf(m - m_new);            // m = -inf before the first key: e^-inf = 0
            const float p = expf(s - m_new);
            l = l * rescale + p;
            for (int c = 0; c < D; ++c) acc[c] = acc[c] * rescale + p * v_tile[j][c];
            m = m_new;
        }
        __syncthreads();                                   // every thread is done with the tile
    }
    if (has_row) {
        const float inv_l = 1.0f / l;
        for (int c = 0; c < D; ++c) o[(head * n_q + row) * D + c] = acc[c] * inv_l;
        lse[head * n_q + row] = m + logf(l);
    }
}
