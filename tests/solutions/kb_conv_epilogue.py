import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Fused ReLU + per-channel bias epilogue after the cuDNN convolution
fused_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_bias_kernel(const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ out,
                                 int total, int hw, int channels) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < total) {
        int c = (idx / hw) % channels;
        float v = x[idx];
        out[idx] = (v > 0.0f ? v : 0.0f) + bias[c];
    }
}

torch::Tensor relu_bias_cuda(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    int total = x.numel();
    int channels = x.size(1);
    int hw = x.size(2) * x.size(3);
    const int block_size = 256;
    relu_bias_kernel<<<(total + block_size - 1) / block_size, block_size>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), total, hw, channels);
    return out;
}
"""

fused_cpp_source = "torch::Tensor relu_bias_cuda(torch::Tensor x, torch::Tensor bias);"

fused_op = load_inline(
    name="kb_conv_relu_bias",
    cpp_sources=fused_cpp_source,
    cuda_sources=fused_source,
    functions=["relu_bias_cuda"],
    verbose=True,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)
        self.fused_op = fused_op

    def forward(self, x):
        x = self.conv(x)  # cuDNN convolution
        return self.fused_op.relu_bias_cuda(x.contiguous(), self.bias.contiguous())


batch_size = 8
in_channels = 3
out_channels = 16
height, width = 32, 32
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
