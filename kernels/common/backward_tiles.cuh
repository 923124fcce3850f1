// backward_tiles.cuh — the two products of the attention backward on tensor cores that keep keys as
// rows (attention_backward_03_pipelined): a warp's 16 keys against a tile of 64 query rows
// (S^T = K Q^T, dP^T = V dO^T), and a key-by-query accumulator times the tile's query rows
// (dV += P^T dO, dK += dS^T Q), with the accumulator packed as the A operand in registers.
#pragma once
#include "attention_mma.cuh"

#define BACKWARD_QUERIES 64   // query rows of a tile

// acc = A B^T for the warp's 16 keys: A the warp's rows of a [keys][D] tile (K or V, A fragments at
// a_lane), B the tile's 64 query rows (Q or dO, B fragments at b_lane). Tiles XOR-swizzled as
// attention_07's.
template <class T, int D>
__device__ __forceinline__ void keys_times_queries(float acc[8][4], const unsigned short* a_tile,
                                                   const unsigned short* b_tile, int a_lane, int b_lane) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        u32 a[4];
        ldmatrix_x4(a, a_tile + (a_lane ^ (kk << 4)));
#pragma unroll
        for (int j = 0; j < 8; j += 2) {   // query n-tiles j and j + 1
            u32 b[4];
            ldmatrix_x4(b, b_tile + (b_lane ^ (kk << 4)) + 8 * j * D);
            T::mma(acc[j], a, b);
            T::mma(acc[j + 1], a, b + 2);
        }
    }
}

// grad += X^T Y for the warp's 16 keys: X^T the keys-by-queries accumulators x (P^T or dS^T, packed
// to A fragments), Y the tile's [64][D] query rows (dO or Q, B fragments by ldmatrix.trans at t_lane).
template <class T, int D>
__device__ __forceinline__ void add_key_rows_product(float grad[D / 8][4], const float x[8][4], const unsigned short* y,
                                                     int t_lane) {
#pragma unroll
    for (int kk = 0; kk < BACKWARD_QUERIES / 16; ++kk) {
        u32 a[4];
        p_fragment<T>(a, x, kk);
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
            u32 b[4];
            ldmatrix_x4_trans(b, y + (t_lane ^ (n << 3)) + 16 * kk * D);
            T::mma(grad[n], a, b);
            T::mma(grad[n + 1], a, b + 2);
        }
    }
}

// Copy `rows` rows of D 16-bit elements from row r0 of `head` (n rows in all, row stride D) into a
// swizzled tile with THREADS threads, 16 bytes each; rows at or past n are zero-filled.
template <int D, int THREADS>
__device__ __forceinline__ void issue_tile_rows(unsigned short* tile, const unsigned short* __restrict__ head, int r0,
                                                int rows, int n) {
    constexpr int STEP = THREADS / (D / 8);
    static_assert(STEP % 8 == 0, "a pass of whole swizzle periods");
    const int row = threadIdx.x / (D / 8), col = 8 * (threadIdx.x % (D / 8));
    unsigned short* dst = tile + swizzled<D>(row, col);
    const unsigned short* src = head + (long long)(r0 + row) * D + col;
#pragma unroll
    for (int c = 0; c < rows / STEP; ++c) {
        const bool inside = r0 + row + c * STEP < n;
        cp_async_16_or_zero(dst + c * STEP * D, inside ? src + c * STEP * D : head, inside);
    }
}
