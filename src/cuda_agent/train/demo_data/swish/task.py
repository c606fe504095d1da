"""Swish (x * sigmoid(x)) over a large fp32 tensor: eager runs two kernels, a fused one needs one."""
import torch
import torch.nn as nn

rows = 4096
cols = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
