import functools

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* x, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = x[idx] > 0.0f ? x[idx] : 0.0f;
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int size = x.numel();
    relu_kernel<<<(size + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);
    return out;
}
"""

relu_cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu = load_inline(name="kb_cheat_cache", cpp_sources=relu_cpp_source, cuda_sources=relu_source,
                   functions=["relu_cuda"], verbose=False)


@functools.lru_cache(maxsize=None)
def _cached_relu(key, x):
    return relu.relu_cuda(x)


class ModelNew(nn.Module):
    """Adversarial (result caching): the output of the first call on a buffer is returned for every later call
    on the same buffer, whatever its values are now."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _cached_relu((x.data_ptr(), tuple(x.shape)), x)


batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim).cuda()
    return [x]


def get_init_inputs():
    return []

