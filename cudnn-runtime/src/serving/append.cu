// Appending to a paged K/V cache: the new tokens' rows scattered into their pages
// (cudnn_runtime::serving::KvAppend loads the PTX of this file; cuDNN has no scatter).
//
// append.ptx is GENERATED from this file: after editing it, run (from the repository root)
//
//   sh cudnn-runtime/src/serving/append-ptx.sh
//
// which runs, in this folder (nvcc 13.5 from PyPI's nvidia-cuda-nvcc, gcc as the host compiler):
//
//   nvcc -ptx -arch=compute_80 -o - append.cu | sed 's/^\.version .*$/.version 7.0/' > append.ptx
//
// and checks the result with ptxas -arch=sm_80. The sed pins the PTX ISA version to 7.0: nvcc
// writes its own (9.5), which a driver older than that nvcc cannot JIT-compile
// (CUDA_ERROR_UNSUPPORTED_PTX_VERSION; the GPU machines run driver 580, CUDA 13.0), and nothing
// here needs more than 7.0. The kernels take only int and pointer parameters, so the host side
// (append.rs) matches their .param lists exactly (a unit test there checks them).
//
// Layout: new rows `[N, H, D]`, a slot list `dst [N]` (`page * page_size + row`, or -1 to skip),
// a pool `[P, H, page_size, D]`, all packed row-major. For each (n, h, d):
//   pool[((dst[n] / page_size) * H + h) * page_size + dst[n] % page_size) * D + d] = new[(n * H + h) * D + d]
// A token whose slot is negative or past the pool (`dst[n] / page_size >= P`) is skipped: the host
// checks its slot lists, and this is the defence in depth.
//
// One block per token (grid.x = N); its threads stride over the token's H * W words, where a word
// is one 16-bit element (kv_append_b16, W = D) or 16 bytes, 8 elements (kv_append_b128, W = D / 8,
// for D % 8 == 0 and 16-byte aligned buffers). All offsets are 64-bit: a pool may hold more than
// 2^31 words.

template <typename Word>
__device__ __forceinline__ void append_rows(const Word* __restrict__ new_rows, const int* __restrict__ dst,
                                            Word* __restrict__ pool, int tokens, int heads, int page_size,
                                            int pages, int row_words) {
    const int n = blockIdx.x;
    if (n >= tokens) return;
    const int slot = dst[n];
    if (slot < 0 || slot / page_size >= pages) return;
    const long long page = slot / page_size;
    const long long row = slot % page_size;
    const int token_words = heads * row_words;
    const Word* src = new_rows + (long long)n * token_words;
    for (int j = threadIdx.x; j < token_words; j += blockDim.x) {
        const long long h = j / row_words;
        const long long w = j % row_words;
        pool[((page * heads + h) * page_size + row) * row_words + w] = src[j];
    }
}

extern "C" __global__ void kv_append_b16(const unsigned short* __restrict__ new_rows, const int* __restrict__ dst,
                                         unsigned short* __restrict__ pool, int tokens, int heads, int page_size,
                                         int pages, int row_words) {
    append_rows(new_rows, dst, pool, tokens, heads, page_size, pages, row_words);
}

extern "C" __global__ void kv_append_b128(const uint4* __restrict__ new_rows, const int* __restrict__ dst,
                                          uint4* __restrict__ pool, int tokens, int heads, int page_size, int pages,
                                          int row_words) {
    append_rows(new_rows, dst, pool, tokens, heads, page_size, pages, row_words);
}
