// Each row of a batch of vectors divided by its length, one block per row: the embedder's last step in one
// launch instead of CuPy's cast, square, sum, square root, maximum and division (each its own kernel, each
// compiled for the batch's shape the first time it is seen).
//
//   x    [rows, dim] float32 (or fp16 with IN_HALF: in_t and from_in, half.cuh), C-contiguous
//   out  [rows, dim] float32 (or fp16 with OUT_HALF: out_t and to_out), C-contiguous
//
// In float32, like the NumPy reference (tritonprep.classifier.embedding._unit): out = v / max(|v|, 1e-12),
// so an all-zero row stays zero; a NaN anywhere in a row makes the whole row NaN (np.maximum keeps the NaN,
// fmaxf alone would not). UNIT_THREADS threads per block, a multiple of 32 (set by the launcher).

#ifndef UNIT_THREADS
#define UNIT_THREADS 256
#endif

extern "C" __global__ void tritonprep_unit_rows(const in_t* __restrict__ x, out_t* __restrict__ out, const int dim) {
    __shared__ float partial[UNIT_THREADS / 32];
    __shared__ float length;
    const in_t* row = x + (long long)blockIdx.x * dim;
    out_t* dst = out + (long long)blockIdx.x * dim;
    const int t = threadIdx.x;

    float squares = 0.0f;
    for (int c = t; c < dim; c += UNIT_THREADS) {
        const float v = from_in(row[c]);
        squares = fmaf(v, v, squares);
    }
    for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_down_sync(0xffffffffu, squares, offset);
    if ((t & 31) == 0) partial[t >> 5] = squares;
    __syncthreads();
    if (t == 0) {
        float total = 0.0f;
        for (int w = 0; w < UNIT_THREADS / 32; ++w) total += partial[w];
        const float norm = sqrtf(total);
        length = isnan(norm) ? norm : fmaxf(norm, 1e-12f);
    }
    __syncthreads();
    const float d = length;
    for (int c = t; c < dim; c += UNIT_THREADS) dst[c] = to_out(from_in(row[c]) / d);
}
