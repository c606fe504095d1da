"""KernelBench-style task: a * scale + b, with a constructor argument."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return a * self.scale + b


def get_inputs():
    return [torch.randn(128, 2048), torch.randn(128, 2048)]


def get_init_inputs():
    return [0.5]
