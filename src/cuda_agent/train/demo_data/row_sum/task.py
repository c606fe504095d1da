"""Reduction: sum over the last dimension."""
import torch
import torch.nn as nn

batch = 2048
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(batch, dim)]


def get_init_inputs():
    return []
