// cross_entropy_02_cluster — cross-entropy from logits with the row held on chip: a cluster of C
// blocks per row, each caching its chunk of the row in shared memory, so that the gradient is
// written from the cache and the logits are read from DRAM once.
//
// Changed from cross_entropy_01_rows: there a block reads its row twice (once for the LSE, once
// for the gradient), and the second read comes from L2 only while the rows in flight fit in it; a
// row of 128256 bf16 logits is 256 KB, and the 264 rows two blocks per SM keep in flight are 66 MB,
// more than the L2. Here a row is split into C contiguous chunks (C = 1 .. 16, a power of two) of
// at most 64 KB, one block each, the C blocks of a row a thread-block cluster (co-scheduled on one
// GPC). A block reads its chunk once, caching the raw bits in shared memory on the way, and folds
// it into (m, l); the blocks meet at a cluster barrier, warp 0 of every block reads the C states
// from the other blocks' shared memory (mapa + ld.shared::cluster, cluster.cuh) and combines them;
// with label smoothing, each block then sums its chunk's (s_j - m) for the row's m (smooth_sum.cuh)
// and the blocks meet once more to add the C sums; each block then writes its chunk's gradient
// from its cache. The formulas are cross_entropy_01_rows' (its header has them).
//
// The target's logit is read by block 0's thread 0 before the first cluster barrier: with the
// gradient written over the logits (dx == x), no block writes before every block has passed it.
// Block 0 writes the row's loss and LSE. A second cluster barrier, waited on at the very end,
// keeps every block's shared memory alive until the others have read its state.
//
// Launch:  grid = n_rows * C blocks (row = blockIdx.x / C, chunk = cluster rank), cluster = (C, 1, 1),
//          block = T threads, dynamic shared memory = chunk_pieces pieces. A piece is a 16-byte vector
//          (entries _v4 for fp32, _v8 for fp16 / bf16: every row of x and dx starts on a 16-byte
//          boundary) or one element (_v1); chunk k holds pieces [k chunk_pieces, (k + 1) chunk_pieces)
//          of the row's n_cols / V whole pieces, and the last block also the < V tail elements (from
//          global memory, not cached). C = 16 needs the non-portable cluster size attribute.
// Traffic: x read once, dx written once (8 bytes of loss and LSE per row); without a gradient
//          (grad_scale == nullptr) x read once.
// Limits:  n_cols <= 2^31 - 2^16 and C x chunk_pieces >= n_cols / V; the options, dtypes and NaN
//          behaviour of cross_entropy_01_rows. sm_90 or newer (clusters).
#include "cluster.cuh"
#include "online_rows.cuh"
#include "smooth_sum.cuh"
#include "vec_io.cuh"

// What a thread loads at a time: a 16-byte vector of the row policy's elements, or one element.
template <class Row, bool Vector>
struct Piece {
    typedef typename Row::Vec Raw;
    static constexpr int N = Row::VEC;
    static constexpr int UNROLL = Row::UNROLL;   // 16 elements of loads in flight per thread
    static __device__ __forceinline__ void unpack(Raw r, float* f) { Row::unpack(r, f); }
    static __device__ __forceinline__ Raw pack(const float* f) { return Row::pack(f); }
};

template <class Row>
struct Piece<Row, false> {
    typedef typename Row::Elem Raw;
    static constexpr int N = 1;
    static constexpr int UNROLL = 8;
    static __device__ __forceinline__ void unpack(Raw r, float* f) { f[0] = Row::load1(&r); }
    static __device__ __forceinline__ Raw pack(const float* f) { return Row::from_float(f[0]); }
};

// The float at `local` (a __shared__ float) as stored in block `rank` of the cluster.
__device__ __forceinline__ float cluster_load_float(const float* local, unsigned int rank) {
    const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(local));
    unsigned int remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
    return v;
}

// The per-element work is most of this kernel's time for 16-bit logits (at 2 bytes an element the
// instructions, not the bytes, set the pace), so it is specialized: Capped and Smooth are compile-time
// (the entry picks one of four bodies from softcap and label_smoothing), an ignored row skips both
// passes' arithmetic, the target's element is found per piece rather than by a comparison per
// element, and p_j is 2^((s_j - m) log2 e) as pass 1 summed it.
template <class Row, bool Vector, bool Capped, bool Smooth>
__device__ __forceinline__ void cross_entropy_cluster(
    const typename Row::Elem* x, typename Row::Elem* dx, const long long* __restrict__ targets,
    float* __restrict__ loss, float* __restrict__ lse_out, const float* __restrict__ grad_scale, int n_cols,
    long long x_stride, long long dx_stride, int chunk_pieces, long long ignore_index, float label_smoothing,
    float z_loss, float softcap) {
    typedef Piece<Row, Vector> P;
    typedef typename P::Raw Raw;
    constexpr int N = P::N, U = P::UNROLL;
    extern __shared__ uint4 shared_cache[];
    Raw* cache = reinterpret_cast<Raw*>(shared_cache);
    __shared__ OnlineState scratch[32];
    __shared__ float sums[32];
    __shared__ __align__(8) OnlineState block_state;   // read by the other blocks of the cluster
    __shared__ float block_total;                       // (likewise)
    __shared__ OnlineState row_state;
    __shared__ float row_total;

    const unsigned int n_chunks = cluster_size();
    const unsigned int chunk = cluster_rank();
    const long long row = blockIdx.x / n_chunks;
    const typename Row::Elem* row_x = x + row * x_stride;
    const int n_pieces = n_cols / N;
    const int first = static_cast<int>(chunk) * chunk_pieces;
    const int count = max(0, min(chunk_pieces, n_pieces - first));
    const bool last = chunk == n_chunks - 1;
    const int step = static_cast<int>(blockDim.x);
    const Raw* chunk_x = reinterpret_cast<const Raw*>(row_x) + first;
    auto cap = [&](float v) { return Capped ? softcap * tanhf(v / softcap) : v; };

    // pass 1: U pieces a thread in flight, cached on the way, folded into (m, l) with one rescale
    OnlineState s = online_identity();
    SmoothSum smooth;
    for (int start = threadIdx.x; start < count; start += U * step) {
        Raw raw[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (start + u * step < count) raw[u] = chunk_x[start + u * step];
        float v[U * N];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (start + u * step < count) {
                cache[start + u * step] = raw[u];
                P::unpack(raw[u], v + u * N);
#pragma unroll
                for (int k = 0; k < N; ++k) v[u * N + k] = cap(v[u * N + k]);
                if (Smooth) smooth.push<N>(v + u * N);
            } else {
#pragma unroll
                for (int k = 0; k < N; ++k) v[u * N + k] = neg_inf();   // adds exactly 0
            }
        }
        online_push_exp2<U * N>(s, v);
    }
    if (last)
        for (int j = n_pieces * N + threadIdx.x; j < n_cols; j += step) {
            const float v = cap(Row::load1(row_x + j));
            if (Smooth) smooth.push<1>(&v);
            online_push_exp2(s, v);
        }
    const long long target = targets[row];
    const bool ignored = target == ignore_index;
    const float s_t = chunk == 0 && threadIdx.x == 0 && !ignored ? cap(Row::load1(row_x + target)) : 0.0f;
    s = online_block_reduce(s, scratch);
    if (threadIdx.x == 0) block_state = s;
    cluster_sync();                                       // every block's state is visible
    const OnlineState whole = cluster_reduce_states(&block_state, &row_state);
    if (Smooth) {   // the chunk's sum of (s_j - m) for the row's m, then the C of them
        const float chunk_total = block_reduce<false>(smooth.below(whole.m), sums);
        if (threadIdx.x == 0) block_total = chunk_total;
        cluster_sync();                                   // every block's sum is visible
        if (threadIdx.x < 32) {
            float t = threadIdx.x < n_chunks ? cluster_load_float(&block_total, threadIdx.x) : 0.0f;
            t = warp_sum(t);
            if (threadIdx.x == 0) row_total = t;
        }
        __syncthreads();
    }
    cluster_arrive();                                     // done reading the others' shared memory
    const float total = Smooth ? row_total : 0.0f;
    const float lse = whole.m + logf(whole.l);

    if (chunk == 0 && threadIdx.x == 0) {   // cross_entropy_01_rows' loss, written around m
        const float value = logf(whole.l) + (1.0f - label_smoothing) * (whole.m - s_t)
                            - (Smooth ? label_smoothing * (total / n_cols) : 0.0f) + z_loss * lse * lse;
        loss[row] = ignored ? 0.0f : value;
        lse_out[row] = lse;
    }

    if (grad_scale != nullptr) {   // pass 2: the gradient from the cache
        typename Row::Elem* row_dx = dx + row * dx_stride;
        Raw* chunk_dx = reinterpret_cast<Raw*>(row_dx) + first;
        if (ignored) {   // 0 everywhere, never 0 * NaN
            float zeros[N] = {};
            const Raw zero = P::pack(zeros);
            for (int i = threadIdx.x; i < count; i += step) chunk_dx[i] = zero;
            if (last)
                for (int j = n_pieces * N + threadIdx.x; j < n_cols; j += step) row_dx[j] = Row::from_float(0.0f);
        } else {
            const float scale = *grad_scale;
            const float p_scale = scale * (1.0f + 2.0f * z_loss * lse) / whole.l;
            const float uniform = Smooth ? scale * label_smoothing / n_cols : 0.0f;
            const float hit = scale * (1.0f - label_smoothing);
            const float m = whole.m;
            auto gradient = [&](float x_j) {
                const float s_j = cap(x_j);
                float g = p_scale * exp_sub(s_j, m);
                if (Smooth) g -= uniform;
                if (Capped) g *= 1.0f - (s_j / softcap) * (s_j / softcap);
                return g;
            };
            // the target's piece and its place in it (a piece of another chunk is never met here)
            const long long target_piece = target / N - first;
            const int target_lane = static_cast<int>(target % N);
            auto hit_at = [&](float x_t) {   // the one-hot's term, through the cap's slope at s_t
                const float s_t = cap(x_t);
                return Capped ? hit * (1.0f - (s_t / softcap) * (s_t / softcap)) : hit;
            };
#pragma unroll 4
            for (int i = threadIdx.x; i < count; i += step) {
                float v[N];
                P::unpack(cache[i], v);
                const float one_hot = i == target_piece ? hit_at(v[target_lane]) : 0.0f;
#pragma unroll
                for (int k = 0; k < N; ++k) v[k] = gradient(v[k]);
                if (i == target_piece) v[target_lane] -= one_hot;
                chunk_dx[i] = P::pack(v);
            }
            if (last)
                for (int j = n_pieces * N + threadIdx.x; j < n_cols; j += step) {
                    const float x_j = Row::load1(row_x + j);
                    row_dx[j] = Row::from_float(gradient(x_j) - (j == target ? hit_at(x_j) : 0.0f));
                }
        }
    }
    cluster_wait();                                       // nobody exits while its state may be read
}

#define CROSS_ENTROPY_02_BODY(ROW, VECTOR, CAPPED, SMOOTH)                                                    \
    cross_entropy_cluster<ROW, VECTOR, CAPPED, SMOOTH>(x, dx, targets, loss, lse, grad_scale, n_cols, x_stride,   \
                                                       dx_stride, chunk_pieces, ignore_index, label_smoothing,   \
                                                       z_loss, softcap)

#define CROSS_ENTROPY_02(TAG, ROW, VECTOR, V)                                                                  \
    extern "C" __global__ void __launch_bounds__(1024) cross_entropy_02_cluster_##TAG##_v##V(                  \
        const ROW::Elem* x, ROW::Elem* dx, const long long* __restrict__ targets, float* __restrict__ loss,     \
        float* __restrict__ lse, const float* __restrict__ grad_scale, int n_cols, long long x_stride,          \
        long long dx_stride, int chunk_pieces, long long ignore_index, float label_smoothing, float z_loss,     \
        float softcap) {                                                                                         \
        if (softcap > 0.0f) {                                                                                    \
            if (label_smoothing != 0.0f) CROSS_ENTROPY_02_BODY(ROW, VECTOR, true, true);                        \
            else CROSS_ENTROPY_02_BODY(ROW, VECTOR, true, false);                                                \
        } else {                                                                                                 \
            if (label_smoothing != 0.0f) CROSS_ENTROPY_02_BODY(ROW, VECTOR, false, true);                       \
            else CROSS_ENTROPY_02_BODY(ROW, VECTOR, false, false);                                               \
        }                                                                                                        \
    }

CROSS_ENTROPY_02(f32, F32Row, true, 4) CROSS_ENTROPY_02(f16, F16Row, true, 8) CROSS_ENTROPY_02(bf16, BF16Row, true, 8)
CROSS_ENTROPY_02(f32, F32Row, false, 1) CROSS_ENTROPY_02(f16, F16Row, false, 1) CROSS_ENTROPY_02(bf16, BF16Row, false, 1)
