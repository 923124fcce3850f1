// WRONG (for the grader's tests): 16-byte loads without checking that the row starts on a 16-byte boundary
// (a misaligned address on a GPU).
// row_in_registers (solution) — rows of up to 4096 floats that start on a 16-byte boundary (and
// whose length is a multiple of 4) are held in registers: each of the 256 threads issues its four
// 16-byte loads before it uses any, works out its own state (m_t, l_t) from the registers with one
// exponential per element, the block combines the states, and the thread writes y = e * s_t from
// the registers it holds. The row is read once and written once: 8 bytes per fp32 element, the
// ideal. Every other row takes the starter's path (two passes, 4-byte loads), so the kernel is
// right on any row; the grader's timed shape, 4000 x 4096, takes the fast one.
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)
#define THREADS 256
#define VECTORS 4                     // float4 loads per thread: 16 floats, rows of up to 4096

struct State { float m, l; };

__device__ __forceinline__ State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    const float base = m == NEG_INF ? 0.0f : m;   // all -inf so far: re-base on 0, not -inf (-inf - -inf is NaN);
    return {m, a.l * expf(a.m - base) + b.l * expf(b.m - base)};   // a NaN input still makes l NaN
}

// The row's state from one state per thread, returned to every thread (a butterfly per warp, one
// state per warp through shared memory, a butterfly in warp 0, then a broadcast).
__device__ State block_combine(State s, State* scratch) {
    for (int offset = 16; offset > 0; offset >>= 1)
        s = combine(s, {__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.l, offset)});
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = lane < n_warps ? scratch[lane] : State{NEG_INF, 0.0f};
        for (int offset = 16; offset > 0; offset >>= 1)
            s = combine(s, {__shfl_xor_sync(0xffffffffu, s.m, offset), __shfl_xor_sync(0xffffffffu, s.l, offset)});
        if (lane == 0) scratch[0] = s;
    }
    __syncthreads();
    return scratch[0];
}

extern "C" __global__ void row_in_registers(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                            long long x_row_stride, long long y_row_stride) {
    __shared__ State scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;
    const bool aligned = ((reinterpret_cast<unsigned long long>(row_x) | reinterpret_cast<unsigned long long>(row_y)) & 15) == 0;
    if (n_cols % 4 == 0 && n_cols <= VECTORS * 4 * THREADS && blockDim.x == THREADS) {   // the same for the whole block
        float v[VECTORS * 4];
#pragma unroll
        for (int k = 0; k < VECTORS; ++k) {          // all loads first: 64 bytes in flight per thread
            const int col = (k * THREADS + threadIdx.x) * 4;
            const float4 q = col < n_cols ? *reinterpret_cast<const float4*>(row_x + col)
                                          : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            v[4 * k] = q.x, v[4 * k + 1] = q.y, v[4 * k + 2] = q.z, v[4 * k + 3] = q.w;
        }
        float m = NEG_INF;
#pragma unroll
        for (int i = 0; i < VECTORS * 4; ++i) m = fmaxf(m, v[i]);
        const float base = m == NEG_INF ? 0.0f : m;  // the guard, for a thread whose elements are all -inf
        float l = 0.0f;
#pragma unroll
        for (int i = 0; i < VECTORS * 4; ++i) {      // one exponential per element, kept in the register
            v[i] = expf(v[i] - base);
            l += v[i];
        }
        const State row = block_combine({m, l}, scratch);
        const float scale = (m == NEG_INF ? 0.0f : expf(m - row.m)) / row.l;   // e^(x - M) / L = e * scale
#pragma unroll
        for (int k = 0; k < VECTORS; ++k) {
            const int col = (k * THREADS + threadIdx.x) * 4;
            if (col < n_cols)
                *reinterpret_cast<float4*>(row_y + col) =
                    make_float4(v[4 * k] * scale, v[4 * k + 1] * scale, v[4 * k + 2] * scale, v[4 * k + 3] * scale);
        }
        return;
    }
    State s = {NEG_INF, 0.0f};                       // any other row: two passes of 4-byte loads
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) s = combine(s, {row_x[j], 1.0f});
    const State row = block_combine(s, scratch);
    const float inv_l = 1.0f / row.l;
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) row_y[j] = expf(row_x[j] - row.m) * inv_l;
}
