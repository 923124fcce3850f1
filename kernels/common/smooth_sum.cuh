// The label-smoothing term of cross-entropy, m - mean_j s_j = -(1/V) sum_j (s_j - m), summed without
// subtracting two large numbers. m - (sum_j s_j) / V loses every digit when the logits are large and
// close: for three logits of 1e10 the fp32 sum is off by 2^10, so the term is off by hundreds where
// it is 0. Here each thread sums s_j - ref, ref the largest s_j it has seen, and when ref grows by
// delta the n terms it already holds are moved by n * delta (as the online normalizer rescales l);
// the block then adds n (ref - m) for the row's m. ref starts at -FLT_MAX, not -inf, so that a -inf
// logit adds -inf (the term is +inf, as torch's -mean(log_softmax)), never -inf - (-inf) = NaN; a NaN
// logit makes the sum NaN, and the loss with it.
#pragma once

struct SmoothSum {
    float ref;   // the largest s_j this thread has seen (-FLT_MAX before any)
    float d;     // sum of (s_j - ref) over the n of them
    int n;

    __device__ __forceinline__ SmoothSum() : ref(-3.402823466e38f), d(0.0f), n(0) {}

    template <int K>
    __device__ __forceinline__ void push(const float* v) {
        float top = ref;
#pragma unroll
        for (int k = 0; k < K; ++k) top = fmaxf(top, v[k]);
        if (top > ref) {
            if (n) d = fmaf(static_cast<float>(n), ref - top, d);
            ref = top;
        }
#pragma unroll
        for (int k = 0; k < K; ++k) d += v[k] - ref;
        n += K;
    }

    // this thread's sum of (s_j - m), m >= every s_j it has seen
    __device__ __forceinline__ float below(float m) const { return n ? fmaf(static_cast<float>(n), ref - m, d) : 0.0f; }
};
