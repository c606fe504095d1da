import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_code = """
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void relu_forward_kernel(const float* __restrict__ input, float* __restrict__ output, const int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) {
        output[i] = fmaxf(input[i], 0.0f);
    }
}

torch::Tensor relu_forward(torch::Tensor input) {
    TORCH_CHECK(input.is_contiguous(), "input must be contiguous");
    auto output = torch::empty_like(input);
    const int64_t n = input.numel();
    const int threads = 256;
    const int blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
    relu_forward_kernel<<<blocks, threads>>>(input.data_ptr<float>(), output.data_ptr<float>(), n);
    return output;
}
"""

cpp_code = "torch::Tensor relu_forward(torch::Tensor input);"

relu_module = load_inline(name="kb_alias_model_relu", cpp_sources=cpp_code, cuda_sources=cuda_code,
                          functions=["relu_forward"], verbose=False)


class Model(nn.Module):
    """The optimized model: its own grid-stride ReLU kernel."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return relu_module.relu_forward(x.contiguous())


ModelNew = Model

batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim).cuda()
    return [x]


def get_init_inputs():
    return []
