"""ReLU whose own inputs happen to be non-negative, small enough for the CPU rehearsal
(tests/test_rehearsal.py): an identity kernel passes on these inputs and fails on signed ones."""
import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(n)]


def get_init_inputs():
    return []
