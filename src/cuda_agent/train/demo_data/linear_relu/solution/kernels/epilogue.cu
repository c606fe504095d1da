#include <cuda_runtime.h>
__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ b, long rows, int cols) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  long n = rows * cols;
  if (i < n) { float v = y[i] + b[i % cols]; y[i] = v > 0.f ? v : 0.f; }
}
extern "C" int launch_bias_relu(float* y, const float* b, long rows, int cols, cudaStream_t s) {
  long n = rows * cols;
  bias_relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, b, rows, cols);
  return (int)cudaGetLastError();
}
