// tritonprep: fused resize -> crop/letterbox -> normalize -> channel order -> layout -> dtype.
//
// One launch covers a whole batch of decoded images of different sizes: blockIdx.y is the
// image, the x dimension covers that image's output pixels; each thread writes the three
// channels of one output pixel.
//
// The resize reproduces Pillow's antialiased resampling (libImaging/Resample.c), the
// filter most training pipelines use through PIL/torchvision:
//   * separable, horizontal pass first, each pass rounded and clamped to uint8;
//   * for output index i: scale = in/out, support = filter_support * max(scale, 1),
//     center = (i + 0.5) * scale, taps from (int)(center - support + 0.5) to
//     (int)(center + support + 0.5) (clamped to the image), weights
//     filter((x - center + 0.5) / max(scale, 1)) normalized to sum 1.
// Pillow runs the two passes over whole rows; here each thread evaluates the horizontal
// pass for just the source rows its vertical taps need (rounded to uint8 like Pillow's
// intermediate image), so the result matches Pillow's to within rounding of its 22-bit
// fixed-point coefficients. Pillow skips a pass whose size does not change; the formula
// above reduces to the identity in that case, so no special case is needed.
//
// With FILTER_CV2_LINEAR the resize is OpenCV's INTER_LINEAR for 8-bit images instead
// (imgproc/src/resize.cpp), how YOLO-family detectors are fed: no antialiasing, fixed point.
// Per axis, scale = 1 / (dst / src) in double, source position f = float((d + 0.5) * scale - 0.5),
// s = floor(f), weights round((1 - (f - s)) * 2048) and round((f - s) * 2048), half to even; along x
// a position left of the first or right of the last pixel takes that pixel alone, along y the two
// rows are clamped into the image. Horizontal pass h = w0 * p[s] + w1 * p[s + 1] in integers, then
// the vertical pass as OpenCV's SIMD code rounds it: (((h0 >> 4) * b0 >> 16) + ((h1 >> 4) * b1 >> 16) + 2) >> 2.
// Every floating-point step is written with an explicit rounding intrinsic, so that no FMA
// contraction moves a position across a weight's rounding boundary. The NumPy twin, tested
// bit-exact against OpenCV, is tritonprep/executors/opencv.py (linear_window).
//
// Compile-time options (-D): OUT_HALF (fp16 output, else fp32: out_t and to_out, half.cuh), OUT_NHWC (else NCHW),
// OUT_BGR (else RGB), FILTER_BICUBIC (else bilinear) or FILTER_CV2_LINEAR; and from
// kernels/layout.py, which defines the per-image metadata, the index of each field (META_SRC_W, ...)
// and the row length META_STRIDE.

#ifdef FILTER_BICUBIC
#define FILTER_SUPPORT 2.0
__device__ __forceinline__ float filter_weight(float x) {
    const float a = -0.5f;  // Pillow's bicubic
    x = fabsf(x);
    if (x < 1.0f) return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
    if (x < 2.0f) return (((x - 5.0f) * x + 8.0f) * x - 4.0f) * a;
    return 0.0f;
}
#else
#define FILTER_SUPPORT 1.0
__device__ __forceinline__ float filter_weight(float x) {
    x = fabsf(x);
    return x < 1.0f ? 1.0f - x : 0.0f;
}
#endif

// Taps of one output coordinate along one axis (Pillow's precompute_coeffs).
struct Taps {
    int first;      // first source index
    int count;      // number of source indices
    float center;   // center - first, in source pixels
    float inv;      // 1 / max(scale, 1)
    float norm;     // 1 / sum of weights
};

__device__ __forceinline__ Taps make_taps(int i, int in_size, int out_size) {
    const double scale = (double)in_size / (double)out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = FILTER_SUPPORT * filterscale;
    const double center = ((double)i + 0.5) * scale;
    int lo = (int)(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = (int)(center + support + 0.5);
    if (hi > in_size) hi = in_size;
    Taps t;
    t.first = lo;
    t.count = hi - lo;
    t.center = (float)(center - (double)lo);
    t.inv = (float)(1.0 / filterscale);
    float sum = 0.0f;
    for (int k = 0; k < t.count; ++k) sum += filter_weight(((float)k - t.center + 0.5f) * t.inv);
    t.norm = sum != 0.0f ? 1.0f / sum : 0.0f;
    return t;
}

__device__ __forceinline__ float round_u8(float v) {
    // Pillow: (sum + 2^(PRECISION_BITS-1)) >> PRECISION_BITS, then clip to 0..255
    return fminf(fmaxf(floorf(v + 0.5f), 0.0f), 255.0f);
}

// Pillow's antialiased resample of resized pixel (rx, ry) of an image resized to rw x rh.
__device__ __forceinline__ void resample_pillow(
    const unsigned char* src, int pitch, int src_w, int src_h, int rw, int rh, int rx, int ry,
    float* r, float* g, float* b)
{
    const Taps tx = make_taps(rx, src_w, rw);
    const Taps ty = make_taps(ry, src_h, rh);
    float acc_r = 0.0f, acc_g = 0.0f, acc_b = 0.0f;
    for (int ky = 0; ky < ty.count; ++ky) {
        const float wy = filter_weight(((float)ky - ty.center + 0.5f) * ty.inv) * ty.norm;
        const unsigned char* row = src + (size_t)(ty.first + ky) * pitch + 3 * tx.first;
        float hr = 0.0f, hg = 0.0f, hb = 0.0f;
        for (int kx = 0; kx < tx.count; ++kx) {
            const float wx = filter_weight(((float)kx - tx.center + 0.5f) * tx.inv) * tx.norm;
            hr += wx * (float)__ldg(row + 3 * kx);
            hg += wx * (float)__ldg(row + 3 * kx + 1);
            hb += wx * (float)__ldg(row + 3 * kx + 2);
        }
        acc_r += wy * round_u8(hr);
        acc_g += wy * round_u8(hg);
        acc_b += wy * round_u8(hb);
    }
    *r = round_u8(acc_r);
    *g = round_u8(acc_g);
    *b = round_u8(acc_b);
}

// OpenCV INTER_LINEAR: the two source indices and fixed-point weights (sum 2048) of index d along an axis.
struct Cv2Taps {
    int i0, i1;  // source indices, inside the image
    int w0, w1;  // weights, scale 2048
};

__device__ __forceinline__ Cv2Taps cv2_taps(int d, int src_size, int dst_size, bool clamp_to_edge) {
    const double scale = __ddiv_rn(1.0, __ddiv_rn((double)dst_size, (double)src_size));
    float f = __double2float_rn(__dadd_rn(__dmul_rn((double)d + 0.5, scale), -0.5));
    const float fl = floorf(f);
    int s = (int)fl;
    f = __fsub_rn(f, fl);
    if (clamp_to_edge) {  // the x axis: outside the image, the edge pixel alone
        if (s < 0) { f = 0.0f; s = 0; }
        if (s >= src_size - 1) { f = 0.0f; s = src_size - 1; }
    }
    Cv2Taps t;
    t.w0 = __float2int_rn(__fmul_rn(__fsub_rn(1.0f, f), 2048.0f));
    t.w1 = __float2int_rn(__fmul_rn(f, 2048.0f));
    t.i0 = min(max(s, 0), src_size - 1);
    t.i1 = min(max(s + 1, 0), src_size - 1);
    return t;
}

__device__ __forceinline__ float cv2_channel(const unsigned char* row0, const unsigned char* row1,
                                            const Cv2Taps& tx, const Cv2Taps& ty, int c) {
    const int h0 = tx.w0 * (int)__ldg(row0 + 3 * tx.i0 + c) + tx.w1 * (int)__ldg(row0 + 3 * tx.i1 + c);
    const int h1 = tx.w0 * (int)__ldg(row1 + 3 * tx.i0 + c) + tx.w1 * (int)__ldg(row1 + 3 * tx.i1 + c);
    const int v = (((h0 >> 4) * ty.w0) >> 16) + (((h1 >> 4) * ty.w1) >> 16);
    return (float)min(max((v + 2) >> 2, 0), 255);
}

// OpenCV's INTER_LINEAR of resized pixel (rx, ry) of an image resized to rw x rh.
__device__ __forceinline__ void resample_cv2_linear(
    const unsigned char* src, int pitch, int src_w, int src_h, int rw, int rh, int rx, int ry,
    float* r, float* g, float* b)
{
    const Cv2Taps tx = cv2_taps(rx, src_w, rw, true);
    const Cv2Taps ty = cv2_taps(ry, src_h, rh, false);
    const unsigned char* row0 = src + (size_t)ty.i0 * pitch;
    const unsigned char* row1 = src + (size_t)ty.i1 * pitch;
    *r = cv2_channel(row0, row1, tx, ty, 0);
    *g = cv2_channel(row0, row1, tx, ty, 1);
    *b = cv2_channel(row0, row1, tx, ty, 2);
}

// meta, per image: META_STRIDE ints laid out as kernels/layout.py's ImageMeta says (source size and
// pitch, size after the resize, the output window's offset, and the output slot, so that failed
// images of a batch can be skipped)
extern "C" __global__ void tritonprep_resize_normalize(
    const unsigned long long* __restrict__ src_ptrs,
    const int* __restrict__ meta,
    out_t* __restrict__ out,
    const int out_h, const int out_w,
    const float s0, const float s1, const float s2,
    const float b0, const float b1, const float b2,
    const float pad)
{
    const int img = blockIdx.y;
    const int pix = blockIdx.x * blockDim.x + threadIdx.x;
    if (pix >= out_h * out_w) return;
    const int oy = pix / out_w;
    const int ox = pix - oy * out_w;

    const int* m = meta + META_STRIDE * img;
    const int src_w = m[META_SRC_W], src_h = m[META_SRC_H], pitch = m[META_SRC_PITCH];
    const int rw = m[META_RESIZED_W], rh = m[META_RESIZED_H];
    const int rx = ox + m[META_OFFSET_X], ry = oy + m[META_OFFSET_Y];

    float r, g, b;
    if (rx < 0 || ry < 0 || rx >= rw || ry >= rh) {
        r = g = b = pad;
    } else {
        const unsigned char* src = reinterpret_cast<const unsigned char*>(src_ptrs[img]);
#ifdef FILTER_CV2_LINEAR
        resample_cv2_linear(src, pitch, src_w, src_h, rw, rh, rx, ry, &r, &g, &b);
#else
        resample_pillow(src, pitch, src_w, src_h, rw, rh, rx, ry, &r, &g, &b);
#endif
    }
    // multiply, then add, each rounded (no FMA contraction): bit-identical to the CPU executor's
    // numpy `pixel * scale + bias` for equal pixels
    const float vr = __fadd_rn(__fmul_rn(r, s0), b0);
    const float vg = __fadd_rn(__fmul_rn(g, s1), b1);
    const float vb = __fadd_rn(__fmul_rn(b, s2), b2);
#ifdef OUT_BGR
    const float c0 = vb, c1 = vg, c2 = vr;
#else
    const float c0 = vr, c1 = vg, c2 = vb;
#endif
    const size_t plane = (size_t)out_h * out_w;
    const size_t slot = (size_t)m[META_SLOT];
#ifdef OUT_NHWC
    out_t* o = out + slot * plane * 3 + (size_t)pix * 3;
    o[0] = to_out(c0);
    o[1] = to_out(c1);
    o[2] = to_out(c2);
#else
    out_t* o = out + slot * plane * 3 + pix;
    o[0] = to_out(c0);
    o[plane] = to_out(c1);
    o[2 * plane] = to_out(c2);
#endif
}
