import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

void relu_into(torch::Tensor x, torch::Tensor y) {
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
}
"""

ext = load_inline(name="kb_helper_functions", cpp_sources="void relu_into(torch::Tensor x, torch::Tensor y);",
                  cuda_sources=src, functions=["relu_into"])


def _launch(x):
    """Allocate the output and run the kernel (called from forward)."""
    y = torch.empty_like(x)
    ext.relu_into(x, y)
    return y


def reference_relu(x):
    """What the kernel must match; used while developing, never at run time."""
    return F.relu(x)


def check_against_reference(model, x):
    out = model(x)
    return torch.allclose(out, reference_relu(x), atol=1e-5), (out - reference_relu(x)).abs().max().item()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _launch(x.contiguous())


def get_inputs():
    return [torch.rand(16, 16384, device="cuda") * 2 - 1]


def get_init_inputs():
    return []
