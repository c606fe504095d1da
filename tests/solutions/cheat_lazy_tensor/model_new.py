import torch
import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return Lazy(cuda_ext.ew(x.contiguous()))


class Lazy(torch.Tensor):
    """A tensor subclass: the kind of object that can defer or fake work."""

    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_subclass(cls, data)
