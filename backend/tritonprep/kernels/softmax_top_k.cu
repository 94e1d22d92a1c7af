// Softmax and top-k of each row of logits, one block per row: what a classifier answers (the k best
// classes' probabilities and ids, best first, ties to the lower id) in one launch instead of a softmax,
// a full sort and a gather.
//
//   logits  float32 [rows, classes], C-contiguous
//   out     float32 [rows, 2, k]: out[r][0][j] the j-th best probability of row r, out[r][1][j] its class
//           id as an int32 stored in the float's bits (one buffer: the host reads both with one copy)
//
// The probabilities are exp(x - max) / sum(exp(x - max)) in float32, like the NumPy reference
// (tritonprep.classifier.postprocess.softmax); the ranking compares those probabilities, then ids. A NaN
// logit makes its row's sum NaN, so every probability of that row is NaN (as on the host) and ranks below
// any number: such a row answers NaN scores for the lowest ids.
// TOPK_THREADS threads per block (a power of two); k <= TOPK_MAX_K (both set by the launcher).

#ifndef TOPK_THREADS
#define TOPK_THREADS 128
#endif
#ifndef TOPK_MAX_K
#define TOPK_MAX_K 64
#endif

struct Best {
    float p;
    int id;
};

__device__ __forceinline__ bool better(float p, int id, float q, int jd) {
    return p > q || (p == q && id < jd);
}

extern "C" __global__ void tritonprep_softmax_top_k(const float* __restrict__ logits, float* __restrict__ out,
                                                     const int classes, const int k) {
    __shared__ float reduce_f[TOPK_THREADS];
    __shared__ Best reduce_b[TOPK_THREADS];
    __shared__ int chosen[TOPK_MAX_K];
    const float* x = logits + (long long)blockIdx.x * classes;
    const int t = threadIdx.x;

    float m = __int_as_float(0xff800000);  // -inf
    for (int c = t; c < classes; c += TOPK_THREADS) m = fmaxf(m, x[c]);
    reduce_f[t] = m;
    __syncthreads();
    for (int s = TOPK_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) reduce_f[t] = fmaxf(reduce_f[t], reduce_f[t + s]);
        __syncthreads();
    }
    const float row_max = reduce_f[0];
    __syncthreads();

    float sum = 0.f;
    for (int c = t; c < classes; c += TOPK_THREADS) sum += expf(x[c] - row_max);
    reduce_f[t] = sum;
    __syncthreads();
    for (int s = TOPK_THREADS / 2; s > 0; s >>= 1) {
        if (t < s) reduce_f[t] += reduce_f[t + s];
        __syncthreads();
    }
    const float total = reduce_f[0];

    float* scores = out + (long long)blockIdx.x * 2 * k;
    float* ids = scores + k;
    for (int j = 0; j < k; ++j) {
        Best b = {-2.f, 0x7fffffff};
        for (int c = t; c < classes; c += TOPK_THREADS) {
            bool taken = false;
            for (int i = 0; i < j; ++i) taken |= chosen[i] == c;
            float p = expf(x[c] - row_max) / total;
            if (isnan(p)) p = -1.f;  // a NaN logit ranks last, and still gets a place if k asks for it
            if (!taken && better(p, c, b.p, b.id)) b = {p, c};
        }
        reduce_b[t] = b;
        __syncthreads();
        for (int s = TOPK_THREADS / 2; s > 0; s >>= 1) {
            if (t < s && better(reduce_b[t + s].p, reduce_b[t + s].id, reduce_b[t].p, reduce_b[t].id))
                reduce_b[t] = reduce_b[t + s];
            __syncthreads();
        }
        if (t == 0) {
            chosen[j] = reduce_b[0].id;
            scores[j] = expf(x[reduce_b[0].id] - row_max) / total;  // NaN where the logit was
            ids[j] = __int_as_float(reduce_b[0].id);
        }
        __syncthreads();
    }
}
