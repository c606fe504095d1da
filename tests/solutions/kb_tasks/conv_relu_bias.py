"""KernelBench level-2 style task: Conv2d, ReLU, then a learned per-channel bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.02)

    def forward(self, x):
        x = self.conv(x)
        x = torch.relu(x)
        return x + self.bias


def get_inputs():
    return [torch.randn(8, 3, 32, 32)]


def get_init_inputs():
    return [3, 16, 3]
