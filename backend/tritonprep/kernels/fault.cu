// Fault injection only (tritonprep.faults, action "cuda-illegal-address"): writes through a
// pointer that no allocation owns, which makes the CUDA context report
// cudaErrorIllegalAddress (700) on every later call. The supervision tests use it to check
// that a GPU instance with a poisoned context takes itself out of service.
extern "C" __global__ void tritonprep_illegal_write(unsigned long long address) {
    *reinterpret_cast<volatile int*>(address) = 1;
}
