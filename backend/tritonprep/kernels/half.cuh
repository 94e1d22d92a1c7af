// The kernels' element types, included before each kernel's source by tritonprep/kernels/launch.py.
// Compile-time options (-D): OUT_HALF (fp16 output, else fp32), IN_HALF (fp16 input, else fp32).
// fp16 values travel as their IEEE bits in an unsigned short, converted by PTX instructions (no header
// needed under NVRTC), to fp16 with round-to-nearest-even.

__device__ __forceinline__ unsigned short half_bits(float v) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
}
__device__ __forceinline__ float half_value(unsigned short h) {
    float v;
    asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(h));
    return v;
}
__device__ __forceinline__ float same_float(float v) { return v; }

#ifdef OUT_HALF
typedef unsigned short out_t;
#define to_out half_bits
#else
typedef float out_t;
#define to_out same_float
#endif

#ifdef IN_HALF
typedef unsigned short in_t;
#define from_in half_value
#else
typedef float in_t;
#define from_in same_float
#endif
