"""Single-file (load_inline) swish with Hopper's arch-specific wgmma fence/commit/wait in inline PTX: it
builds only when load_inline targets sm_90a (TORCH_CUDA_ARCH_LIST=9.0a, set by the sandbox on an H100/H200)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAStream.h>

__global__ void swish_wgmma_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  // uniform across the warpgroup, as .sync.aligned requires; nothing in flight, so a no-op in effect
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] / (1.f + expf(-x[i]));
}

torch::Tensor swish(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat, "float32 CUDA contiguous");
  auto y = torch::empty_like(x);
  long n = x.numel();
  swish_wgmma_kernel<<<(n + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
cpp_src = "torch::Tensor swish(torch::Tensor x);"

ext = load_inline(name="swish_sm90a_inline", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["swish"],
                  extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.swish(x.contiguous())
