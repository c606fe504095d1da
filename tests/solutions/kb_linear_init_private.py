import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

#define TILE 16

// out[m, n] = sum_k x[m, k] * w[n, k] + bias[n]
__global__ void linear_tiled_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ bias, float* __restrict__ out,
                                    int M, int N, int K) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int kx = t * TILE + threadIdx.x;
        int kw = t * TILE + threadIdx.y;
        xs[threadIdx.y][threadIdx.x] = (row < M && kx < K) ? x[row * K + kx] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (col < N && kw < K) ? w[col * K + kw] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) out[row * N + col] = acc + bias[col];
}

torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor bias) {
    int M = x.size(0), K = x.size(1), N = w.size(0);
    auto out = torch::empty({M, N}, x.options());
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_tiled_kernel<<<grid, block>>>(x.data_ptr<float>(), w.data_ptr<float>(), bias.data_ptr<float>(),
                                         out.data_ptr<float>(), M, N, K);
    return out;
}
"""

matmul_cpp_source = "torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor bias);"

linear_ext = load_inline(
    name="kb_linear_tiled",
    cpp_sources=matmul_cpp_source,
    cuda_sources=matmul_source,
    functions=["linear_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        self.reset_parameters()
        # the same bound nn.Linear uses, through torch's own (private) helper
        fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(self.weight)
        self.bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return linear_ext.linear_forward(x.contiguous(), self.weight, self.bias)


def get_inputs():
    return [torch.randn(64, 256).cuda()]


def get_init_inputs():
    return [256, 128]
