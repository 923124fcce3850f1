// run_attention.cpp — one tensor-core attention kernel (kernels/attention/attention_0[345]_*.cu),
// its source unchanged, run on the CPU emulator of simt.h. onlinesoftmax/runtime/emulator.py builds
// and drives it:
//
//   g++ -std=c++17 -O2 -I kernels/common -I kernels -I kernels/emulator \
//       -DKERNEL_SOURCE='"attention/attention_03_mma.cu"' -DKERNEL_STEM=attention_03_mma \
//       kernels/emulator/run_attention.cpp -o run_attention_03
//   run_attention_03 DIR TAG BATCH HEADS KV_HEADS N_Q N_K D SCALE_LOG2 CAUSAL WITH_LSE SHARED_BYTES SEED
//   run_attention_03 layouts          (prints the emulator's mma fragment maps, one line per element)
//
// TAG is bf16_d64, bf16_d128, f16_d64 or f16_d128. DIR holds q.bin, k.bin, v.bin (raw 16-bit values,
// C order); out.bin (16-bit) and lse.bin (float32) are written there. Every array sits right before
// an inaccessible page, so reading or writing past its end is a segmentation fault; the outputs are
// poisoned first. The grid, the block and the argument order are the launcher's
// (onlinesoftmax/kernels/attention_mma.py).
#include <sys/mman.h>
#include <unistd.h>

#include "simt.h"
#include KERNEL_SOURCE

#define SIMT_CAT_(a, b) a##b
#define SIMT_CAT(a, b) SIMT_CAT_(a, b)

typedef void (*Entry)(const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*,
                      int, int, int, int, float, int);
static const struct { const char* tag; Entry entry; } ENTRIES[] = {
    {"bf16_d64", SIMT_CAT(KERNEL_STEM, _bf16_d64)}, {"bf16_d128", SIMT_CAT(KERNEL_STEM, _bf16_d128)},
    {"f16_d64", SIMT_CAT(KERNEL_STEM, _f16_d64)}, {"f16_d128", SIMT_CAT(KERNEL_STEM, _f16_d128)}};

// `bytes` of memory ending right before a PROT_NONE page (16-byte aligned: bytes is a multiple of 16).
static void* guarded(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t span = (bytes + page - 1) / page * page + page;
    char* base = static_cast<char*>(mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base == MAP_FAILED || mprotect(base + span - page, page, PROT_NONE) != 0) simt_fail("mmap");
    return base + span - page - bytes;
}

static void* read_file(const char* dir, const char* name, size_t bytes) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = std::fopen(path, "rb");
    if (!f) simt_fail("cannot open an input file");
    void* data = guarded(bytes);
    if (std::fread(data, 1, bytes, f) != bytes) simt_fail("input file too short");
    std::fclose(f);
    return data;
}

static void write_file(const char* dir, const char* name, const void* data, size_t bytes) {
    char path[4096];
    std::snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = std::fopen(path, "wb");
    if (!f || std::fwrite(data, 1, bytes, f) != bytes) simt_fail("cannot write an output file");
    std::fclose(f);
}

static void print_layouts() {   // element (register, half) of each lane -> (row, col), as the emulator reads them
    for (int lane = 0; lane < 32; ++lane) {
        const int group = lane >> 2, in_group = lane % 4;
        for (int i = 0; i < 8; ++i)
            std::printf("A %d %d %d %d %d\n", lane, i / 2, i % 2, (i < 2 || (4 <= i && i < 6)) ? group : group + 8,
                        i < 4 ? in_group * 2 + (i & 1) : in_group * 2 + (i & 1) + 8);
        for (int i = 0; i < 4; ++i)
            std::printf("B %d %d %d %d %d\n", lane, i / 2, i % 2,
                        i < 2 ? in_group * 2 + (i & 1) : in_group * 2 + (i & 1) + 8, group);
        for (int i = 0; i < 4; ++i) std::printf("C %d %d 0 %d %d\n", lane, i, i < 2 ? group : group + 8, in_group * 2 + (i & 1));
    }
}

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "layouts") == 0) {
        print_layouts();
        return 0;
    }
    if (argc != 14) {
        std::fprintf(stderr, "usage: %s DIR TAG BATCH HEADS KV_HEADS N_Q N_K D SCALE_LOG2 CAUSAL WITH_LSE SHARED_BYTES SEED\n",
                     argv[0]);
        return 2;
    }
    const char* dir = argv[1];
    Entry entry = nullptr;
    for (const auto& e : ENTRIES)
        if (std::strcmp(e.tag, argv[2]) == 0) entry = e.entry;
    if (!entry) simt_fail("unknown entry tag");
    const int batch = std::atoi(argv[3]), heads = std::atoi(argv[4]), kv_heads = std::atoi(argv[5]);
    const int n_q = std::atoi(argv[6]), n_k = std::atoi(argv[7]), d = std::atoi(argv[8]);
    const float scale_log2 = std::strtof(argv[9], nullptr);
    const int causal = std::atoi(argv[10]), with_lse = std::atoi(argv[11]);
    const size_t shared_bytes = std::strtoul(argv[12], nullptr, 10);
    const unsigned seed = static_cast<unsigned>(std::strtoul(argv[13], nullptr, 10));

    const size_t q_bytes = size_t(batch) * heads * n_q * d * 2, kv_bytes = size_t(batch) * kv_heads * n_k * d * 2;
    const size_t lse_bytes = size_t(batch) * heads * n_q * 4;
    auto* q = static_cast<const unsigned short*>(read_file(dir, "q.bin", q_bytes));
    auto* k = static_cast<const unsigned short*>(read_file(dir, "k.bin", kv_bytes));
    auto* v = static_cast<const unsigned short*>(read_file(dir, "v.bin", kv_bytes));
    auto* out = static_cast<unsigned short*>(guarded(q_bytes));
    auto* lse = static_cast<float*>(guarded(lse_bytes));
    std::memset(out, 0x7b, q_bytes);   // 0x7b7b: 1.3e36 in bf16, 61280 in fp16: finite, never an answer
    for (size_t i = 0; i < lse_bytes / 4; ++i) lse[i] = 1.2345e30f;

    const simt_dim3 grid{static_cast<unsigned>((n_q + MMA_BLOCK_Q - 1) / MMA_BLOCK_Q), static_cast<unsigned>(heads),
                         static_cast<unsigned>(batch)};
    simt::launch(grid, MMA_THREADS, shared_bytes,
                 [&] { entry(q, k, v, out, with_lse ? lse : nullptr, heads, kv_heads, n_q, n_k, scale_log2, causal); },
                 seed);
    write_file(dir, "out.bin", out, q_bytes);
    write_file(dir, "lse.bin", lse, lse_bytes);
    return 0;
}
