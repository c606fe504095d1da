#include <cuda_runtime.h>
__global__ void ew_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) { y[i] = x[i] / (1.f + expf(-x[i])); }
}
extern "C" int launch_ew(const float* x, float* y, long n, cudaStream_t s) {
  ew_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, n);
  return (int)cudaGetLastError();
}
