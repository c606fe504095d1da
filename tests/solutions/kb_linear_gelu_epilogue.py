import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

gelu_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <math.h>

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

torch::Tensor gelu_tanh(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    gelu_tanh_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

gelu = load_inline(name="kb_linear_gelu", cpp_sources="torch::Tensor gelu_tanh(torch::Tensor x);",
                   cuda_sources=gelu_source, functions=["gelu_tanh"], verbose=False)


class ModelNew(nn.Module):
    """cuBLAS GEMM through F.linear, then our GELU kernel."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.linear(x, self.linear.weight, self.linear.bias)
        return gelu.gelu_tanh(y.contiguous())


def get_inputs():
    return [torch.randn(64, 512)]


def get_init_inputs():
    return [512, 256]
