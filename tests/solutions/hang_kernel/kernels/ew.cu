#include <cuda_runtime.h>
__device__ int never_set = 0;
// Spins forever on a flag nobody sets (an atomic read, so the compiler cannot drop the loop).
__global__ void ew_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) {
    while (atomicAdd(&never_set, 0) == 0) { __nanosleep(1000); }
    y[i] = x[i];
  }
}
extern "C" int launch_ew(const float* x, float* y, long n, cudaStream_t s) {
  ew_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, n);
  return (int)cudaGetLastError();
}
