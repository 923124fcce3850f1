// row_in_registers — this kernel is right, and slow. It is chapter 03's online softmax: one block
// of 256 threads per row, each thread folding its strided slice one 4-byte load at a time, then a
// second pass that reads the row again. Make it move a 4000 x 4096 fp32 tensor at 0.75 or more of
// the device-to-device copy measured in the same run (the grader times both), and keep it right
// on every row of the edge matrix (sizes 1 .. 4097, rows that do not start on a 16-byte boundary,
// -inf, all -inf, +inf, NaN). Ideas, from chapter 06: 16-byte loads (float4); every load of a
// thread issued before the first use; the row held in registers between the passes, so it is read
// from memory once (a row of 4096 is 16 floats per thread); one exponential per element.
// Grade it: kernel_exercises.grade("row_in_registers").
// NVRTC, which cupy compiles with, has no math.h: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

struct State { float m, l; };

__device__ __forceinline__ State combine(State a, State b) {
    const float m = fmaxf(a.m, b.m);
    const float base = m == NEG_INF ? 0.0f : m;   // all -inf so far: re-base on 0, not -inf (-inf - -inf is NaN);
    return {m, a.l * expf(a.m - base) + b.l * expf(b.m - base)};   // a NaN input still makes l NaN
}

extern "C" __global__ void row_in_registers(const float* __restrict__ x, float* __restrict__ y, int n_cols,
                                            long long x_row_stride, long long y_row_stride) {
    __shared__ State scratch[32];
    const float* row_x = x + blockIdx.x * x_row_stride;
    float* row_y = y + blockIdx.x * y_row_stride;
    State s = {NEG_INF, 0.0f};
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) s = combine(s, {row_x[j], 1.0f});
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
    const State row = scratch[0];
    const float inv_l = 1.0f / row.l;
    for (int j = threadIdx.x; j < n_cols; j += blockDim.x) row_y[j] = expf(row_x[j] - row.m) * inv_l;
}
