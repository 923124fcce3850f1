// row_sum, the warm-up of chapters/00_first_kernel.md: yours to write.
extern "C" __global__ void row_sum(const float* x, float* out, int n_cols) {
    // your code: each thread sums its columns, then the block combines the 256 partial sums
}
