// An honest device-to-device copy: four float4 loads in flight per thread, coalesced, then four stores.
#include <cuda_runtime.h>

constexpr int kThreads = 256;
constexpr int kPerThread = 4;

__global__ void hbm_copy_kernel(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
  long base = (long)blockIdx.x * kThreads * kPerThread + threadIdx.x;
  float4 v[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    long i = base + (long)k * kThreads;
    if (i < n4) v[k] = x[i];
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    long i = base + (long)k * kThreads;
    if (i < n4) y[i] = v[k];
  }
}

__global__ void hbm_copy_tail(const float* __restrict__ x, float* __restrict__ y, long start, long n) {
  long i = start + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}

extern "C" int launch_copy(const float* x, float* y, long n, cudaStream_t stream) {
  long n4 = n / 4;
  if (n4 > 0) {
    long per_block = (long)kThreads * kPerThread;
    long blocks = (n4 + per_block - 1) / per_block;
    hbm_copy_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>((const float4*)x, (float4*)y, n4);
  }
  if (n - n4 * 4 > 0) hbm_copy_tail<<<1, 256, 0, stream>>>(x, y, n4 * 4, n);
  return (int)cudaGetLastError();
}
