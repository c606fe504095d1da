import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>

__global__ void relu_kernel(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] > 0.f ? in[i] : 0.f;
}

torch::Tensor fused_relu(torch::Tensor input) {
    auto output = torch::empty_like(input);
    int n = input.numel();
    relu_kernel<<<(n + 511) / 512, 512>>>(input.data_ptr<float>(), output.data_ptr<float>(), n);
    return output;
}
"""

fused = load_inline(name="kb_alias_relu", cpp_sources="torch::Tensor fused_relu(torch::Tensor input);",
                    cuda_sources=source, functions=["fused_relu"])


class FusedReLUModel(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return fused.fused_relu(x.contiguous())


ModelNew = FusedReLUModel


def get_inputs():
    return [torch.randn(16, 16384).cuda()]


def get_init_inputs():
    return []
