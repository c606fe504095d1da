"""KernelBench-style task: a linear layer with its own parameters (kaiming init, as nn.Linear)."""
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        bound = 1 / math.sqrt(in_features)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return x @ self.weight.t() + self.bias


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [256, 128]
