// DELIBERATELY WRONG (oob_write): writes far outside y: an illegal address on a GPU, a segmentation
// fault on the CPU emulator. tests/ assert the grader reports a failure and the caller goes on.
extern "C" __global__ void online_softmax(const float* x, float* y, int n_cols, long long xs, long long ys) {
    y[(long long)n_cols * 1000000000LL] = 1.0f;
}
