// philox.cuh — the counter-based generator Philox4x32-10 (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC 2011), and the Gumbel noise the sampling kernels draw from it.
//
// A counter (four 32-bit words) and a key (two) give four independent 32-bit words; the same
// counter and key always give the same words, on any thread, in any order. A kernel names each
// random number by its place (row, element, call), so that a thread makes only the numbers it
// needs and the NumPy model (onlinesoftmax/kernels/sampling/philox.py) makes the same ones.
#pragma once

struct PhiloxWords {
    unsigned w[4];
};

__device__ __forceinline__ PhiloxWords philox4x32_10(unsigned c0, unsigned c1, unsigned c2, unsigned c3,
                                                      unsigned k0, unsigned k1) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {   // the key is bumped by the Weyl constants between rounds
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const unsigned long long p0 = static_cast<unsigned long long>(0xD2511F53u) * c0;
        const unsigned long long p1 = static_cast<unsigned long long>(0xCD9E8D57u) * c2;
        const unsigned hi0 = static_cast<unsigned>(p0 >> 32), lo0 = static_cast<unsigned>(p0);
        const unsigned hi1 = static_cast<unsigned>(p1 >> 32), lo1 = static_cast<unsigned>(p1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    PhiloxWords out;
    out.w[0] = c0; out.w[1] = c1; out.w[2] = c2; out.w[3] = c3;
    return out;
}

// A uniform in (0, 1) from the word's top 23 bits: (2 r + 1) 2^-24, exact in fp32, so that neither
// 0 nor 1 comes out and -log(-log u) is finite: from -log(-log 2^-24) (about -2.81) up to
// -log(-log(1 - 2^-24)) (about 16.64). GUMBEL_MAX bounds every value from above.
#define GUMBEL_MAX 17.0f

__device__ __forceinline__ float gumbel_from_word(unsigned word) {
    const float u = static_cast<float>(((word >> 9) << 1) | 1u) * 5.9604644775390625e-08f;   // 2^-24
    return -logf(-logf(u));
}
