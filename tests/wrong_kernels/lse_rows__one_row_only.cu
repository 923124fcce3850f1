// DELIBERATELY WRONG (one_row_only): only block 0 writes its LSE; the others leave theirs unwritten.
// tests/test_kernel_exercises.py asserts the grader rejects it and counts the unwritten outputs.
#define NEG_INF __int_as_float(0xff800000)
extern "C" __global__ void lse_rows(const float* __restrict__ x, float* __restrict__ lse, int n_cols,
                                    long long x_row_stride) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float m = NEG_INF, l = 0.0f;
        for (int j = 0; j < n_cols; ++j) m = fmaxf(m, x[j]);
        for (int j = 0; j < n_cols; ++j) l += expf(x[j] - m);
        lse[0] = m + logf(l);
    }
}
