#include <cuda_runtime.h>
// One block per row; each thread sums a strided slice, then warp shuffles and shared memory.
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
  const float* row = x + (long)blockIdx.x * cols;
  float acc = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffff, acc, off);
  __shared__ float warp_sums[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffff, acc, off);
    if (lane == 0) y[blockIdx.x] = acc;
  }
}
extern "C" int launch_row_sum(const float* x, float* y, int rows, int cols, cudaStream_t s) {
  row_sum_kernel<<<rows, 512, 0, s>>>(x, y, cols);
  return (int)cudaGetLastError();
}
