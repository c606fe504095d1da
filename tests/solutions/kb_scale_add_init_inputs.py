import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

scale_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_add_kernel(const float* a, const float* b, float* out, float scale, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] * scale + b[idx];
    }
}

torch::Tensor scale_add_cuda(torch::Tensor a, torch::Tensor b, double scale) {
    auto size = a.numel();
    auto out = torch::empty_like(a);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    scale_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(),
                                                 (float)scale, size);
    return out;
}
"""

scale_add_cpp_source = "torch::Tensor scale_add_cuda(torch::Tensor a, torch::Tensor b, double scale);"

scale_add = load_inline(
    name="kb_scale_add",
    cpp_sources=scale_add_cpp_source,
    cuda_sources=scale_add_source,
    functions=["scale_add_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super(ModelNew, self).__init__()
        self.scale = scale
        self.scale_add = scale_add

    def forward(self, a, b):
        return self.scale_add.scale_add_cuda(a.contiguous(), b.contiguous(), self.scale)


batch_size = 128
dim = 2048
scale = 0.5


def get_inputs():
    a = torch.randn(batch_size, dim).cuda()
    b = torch.randn(batch_size, dim).cuda()
    return [a, b]


def get_init_inputs():
    return [scale]
