#include <cuda_runtime.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : 0.f; }
}
extern "C" void launch_relu(const float* x, float* y, long n, cudaStream_t stream) {
  int threads = 256; long blocks = (n + threads - 1) / threads;
  relu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
}
