// row_sum — your kernel, the warm-up of "Your first kernel". One block of 256 threads per row of x
// (row i starts at x + i * x_row_stride); write the sum of its n_cols floats to out[i]. It is the
// row maximum of that page with + in place of fmaxf and 0 as the starting value: each thread sums
// its columns, then the block combines the 256 partial sums (shared memory and barriers, or warp
// shuffles). A row holding +inf and -inf sums to NaN, as in NumPy.
// Grade it: kernel_exercises.grade("row_sum").
extern "C" __global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int n_cols,
                                   long long x_row_stride) {
    // TODO: your kernel
}
