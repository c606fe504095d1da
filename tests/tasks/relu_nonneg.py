"""ReLU whose own inputs happen to be non-negative (an identity kernel would pass on them)."""
import torch
import torch.nn as nn

n = 1 << 24


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(n)]


def get_init_inputs():
    return []
