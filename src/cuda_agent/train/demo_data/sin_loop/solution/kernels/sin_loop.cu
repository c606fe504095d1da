#include <cuda_runtime.h>
// x <- 0.9 sin(x) + 0.1, `iters` times, fused: one read and one write per element. The explicit
// round-to-nearest multiply and add keep eager's rounding (no fused multiply-add).
__global__ void sin_loop_kernel(const float* __restrict__ x, float* __restrict__ y, long n, int iters) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int k = 0; k < iters; ++k) v = __fadd_rn(__fmul_rn(sinf(v), 0.9f), 0.1f);
  y[i] = v;
}
extern "C" int launch_sin_loop(const float* x, float* y, long n, int iters, cudaStream_t s) {
  sin_loop_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, n, iters);
  return (int)cudaGetLastError();
}
