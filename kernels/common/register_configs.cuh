// register_configs.cuh — the builds of the kernels that hold a row in registers: softmax_07's lane
// groups, softmax_08's blocks, and softmax_14 and log_softmax_02, which have both. Each list names (tag, storage type,
// V elements per access, NV accesses per lane, lanes) and expands a kernel's own entry macro M on
// every item, so the files instantiate the same configurations. The launchers choose among
// the same lists: CONFIGS_07 and CONFIGS_08 in onlinesoftmax/kernels/softmax/fast_configs.py.
#pragma once

// Lane groups (softmax_07's layout): one access per lane and G = 1 .. 32 lanes per row; then G = 32
// and more accesses per lane.
#define REGISTER_GROUPS_SHORT(M, TAG, T, V) \
    M(TAG, T, V, 1, 1) M(TAG, T, V, 1, 2) M(TAG, T, V, 1, 4) M(TAG, T, V, 1, 8) M(TAG, T, V, 1, 16) M(TAG, T, V, 1, 32)
// The scalar path (any alignment): V = 1, up to 16 elements per lane (512 columns), then 32 (1024).
#define REGISTER_GROUPS_SCALAR_16(M, TAG, T) REGISTER_GROUPS_SHORT(M, TAG, T, 1) \
    M(TAG, T, 1, 2, 32) M(TAG, T, 1, 4, 32) M(TAG, T, 1, 8, 32) M(TAG, T, 1, 16, 32)
#define REGISTER_GROUPS_SCALAR(M, TAG, T) REGISTER_GROUPS_SCALAR_16(M, TAG, T) M(TAG, T, 1, 32, 32)
#define REGISTER_GROUPS_VECTOR(M)                                                                       \
    REGISTER_GROUPS_SHORT(M, f32, float, 4) M(f32, float, 4, 2, 32) M(f32, float, 4, 4, 32) M(f32, float, 4, 8, 32) \
    REGISTER_GROUPS_SHORT(M, f16, half_bits, 8) M(f16, half_bits, 8, 2, 32) M(f16, half_bits, 8, 4, 32) \
    REGISTER_GROUPS_SHORT(M, bf16, bf16_bits, 8) M(bf16, bf16_bits, 8, 2, 32) M(bf16, bf16_bits, 8, 4, 32)
#define REGISTER_GROUP_CONFIGS(M) REGISTER_GROUPS_VECTOR(M)                                           \
    REGISTER_GROUPS_SCALAR(M, f32, float) REGISTER_GROUPS_SCALAR(M, f16, half_bits) REGISTER_GROUPS_SCALAR(M, bf16, bf16_bits)
// The same without the scalar 32-per-lane builds (log_softmax_02, which keeps x in its registers
// and spills there): its scalar rows past 512 columns take the block builds.
#define REGISTER_GROUP_CONFIGS_SCALAR_16(M) REGISTER_GROUPS_VECTOR(M)                                 \
    REGISTER_GROUPS_SCALAR_16(M, f32, float) REGISTER_GROUPS_SCALAR_16(M, f16, half_bits)            \
    REGISTER_GROUPS_SCALAR_16(M, bf16, bf16_bits)

// Blocks (softmax_08's layout). fp32: 16 elements per thread from 128 to 1024 threads (rows up to 16K),
// then 32 (up to 32K); fp16 / bf16: 32 elements (64 bytes) per thread, as many bytes in flight as
// fp32's 16; the scalar path: 16 elements per thread, then 32.
#define REGISTER_LADDER(M, TAG, T, V, NV) M(TAG, T, V, NV, 128) M(TAG, T, V, NV, 256) M(TAG, T, V, NV, 512) M(TAG, T, V, NV, 1024)
#define REGISTER_BLOCKS_16(M, TAG, T) \
    M(TAG, T, 8, 2, 128) M(TAG, T, 8, 4, 128) M(TAG, T, 8, 4, 256) M(TAG, T, 8, 4, 512) M(TAG, T, 8, 4, 1024)
#define REGISTER_BLOCK_CONFIGS(M)                                                                       \
    REGISTER_LADDER(M, f32, float, 4, 4) M(f32, float, 4, 8, 1024)                                     \
    REGISTER_BLOCKS_16(M, f16, half_bits) REGISTER_BLOCKS_16(M, bf16, bf16_bits)                       \
    REGISTER_LADDER(M, f32, float, 1, 16) M(f32, float, 1, 32, 1024)                                   \
    REGISTER_LADDER(M, f16, half_bits, 1, 16) M(f16, half_bits, 1, 32, 1024)                           \
    REGISTER_LADDER(M, bf16, bf16_bits, 1, 16) M(bf16, bf16_bits, 1, 32, 1024)
