"""KernelBench level-2 style task: Linear then GELU (tanh approximation)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(64, 512)]


def get_init_inputs():
    return [512, 256]
