"""Normalization: LayerNorm over the last dimension with affine parameters."""
import torch
import torch.nn as nn

batch = 4096
hidden = 4096


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch, hidden)]


def get_init_inputs():
    return [hidden]
