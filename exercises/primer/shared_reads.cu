// shared_reads: every lane reads one word of a shared tile `reps` times, lane l the word l * stride
// (chapters/00_first_kernel.md). Stride 1 is a row of a 32 x 32 float tile, stride 32 a column (all
// 32 lanes in one bank), stride 33 a column of the tile with its rows padded to 33 words.
extern "C" __global__ void shared_reads(float* out, int stride, int reps) {
    __shared__ float tile[32 * 33];
    for (int i = threadIdx.x; i < 32 * 33; i += blockDim.x) tile[i] = (float)i;
    __syncthreads();
    const volatile float* t = tile;                  // volatile: a load every time, none hoisted out of the loop
    const int word = ((threadIdx.x % 32) * stride) % (32 * 33);
    float sum = 0.0f;
    for (int r = 0; r < reps; ++r) sum += t[word];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;   // reps x the word's index
}
