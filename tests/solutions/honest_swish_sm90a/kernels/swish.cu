// The example's swish with Hopper's arch-specific warpgroup instructions (wgmma fence, commit and wait)
// in inline PTX: honest and correct, and it builds only for sm_90a (ptxas rejects wgmma on plain sm_90).
// tests/test_build.py builds it both ways; tests/gpu/test_sandbox_gpu.py evaluates it.
#include <cuda_runtime.h>

// Every thread of every warpgroup runs these, uniformly (the .sync.aligned forms require it). With no
// wgmma.mma_async in flight, the fence orders nothing, the group committed is empty and the wait returns.
__device__ __forceinline__ void warpgroup_fence_commit_wait() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

__global__ void swish_kernel(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
  warpgroup_fence_commit_wait();
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  long stride = (long)gridDim.x * blockDim.x;
  for (; i < n4; i += stride) {
    float4 v = x[i];
    v.x = v.x / (1.f + expf(-v.x));
    v.y = v.y / (1.f + expf(-v.y));
    v.z = v.z / (1.f + expf(-v.z));
    v.w = v.w / (1.f + expf(-v.w));
    y[i] = v;
  }
}

__global__ void swish_tail(const float* __restrict__ x, float* __restrict__ y, long start, long n) {
  long i = start + blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] / (1.f + expf(-x[i]));
}

extern "C" int launch_swish(const float* x, float* y, long n, cudaStream_t stream) {
  long n4 = n / 4;
  if (n4 > 0) {
    int threads = 256;
    long blocks = (n4 + threads - 1) / threads;
    if (blocks > 132 * 32) blocks = 132 * 32;
    swish_kernel<<<(unsigned)blocks, threads, 0, stream>>>((const float4*)x, (float4*)y, n4);
  }
  long rest = n - n4 * 4;
  if (rest > 0) swish_tail<<<1, 256, 0, stream>>>(x, y, n4 * 4, n);
  return (int)cudaGetLastError();
}
