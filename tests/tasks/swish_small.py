"""Swish on a small input: the task of the CPU rehearsal (tests/test_rehearsal.py)."""
import torch
import torch.nn as nn

rows = 256
cols = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
