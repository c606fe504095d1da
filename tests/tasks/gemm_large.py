"""A large FP32 GEMM, 8192^3: under --precision tf32 its reference (cuBLAS) shows how close a vendor GEMM comes
to the TF32 tensor-core peak (tests/gpu/test_roofline_gpu.py)."""
import torch
import torch.nn as nn

N = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
