import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cublas_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>  // its symbols come from the libcublas torch has loaded

__global__ void add_bias_kernel(float* __restrict__ out, const float* __restrict__ bias, int M, int N) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < M * N) out[idx] += bias[idx % N];
}

// out = x @ w^T + bias with cuBLAS (column-major: out^T = w @ x^T), then a custom bias epilogue
torch::Tensor linear_cublas(torch::Tensor x, torch::Tensor w, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && bias.is_cuda(), "CUDA tensors expected");
    x = x.contiguous();
    int M = x.size(0), K = x.size(1), N = w.size(0);
    auto out = torch::empty({M, N}, x.options());
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    cublasSetStream(handle, at::cuda::getCurrentCUDAStream());
    const float alpha = 1.0f, beta = 0.0f;
    cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha,
                w.data_ptr<float>(), K, x.data_ptr<float>(), K, &beta, out.data_ptr<float>(), N);
    int total = M * N;
    add_bias_kernel<<<(total + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        out.data_ptr<float>(), bias.data_ptr<float>(), M, N);
    return out;
}
"""

cublas_cpp = "torch::Tensor linear_cublas(torch::Tensor x, torch::Tensor w, torch::Tensor bias);"

linear_cublas = load_inline(
    name="kb_linear_cublas",
    cpp_sources=cublas_cpp,
    cuda_sources=cublas_source,
    functions=["linear_cublas"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Linear layer: the GEMM through cuBLAS, the bias through our own kernel."""

    def __init__(self, in_features, out_features):
        super(ModelNew, self).__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return linear_cublas.linear_cublas(x, self.weight, self.bias)


def get_inputs():
    return [torch.randn(64, 256, device="cuda")]


def get_init_inputs():
    return [256, 128]
