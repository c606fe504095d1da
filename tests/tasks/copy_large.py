"""A device-to-device copy of 1 GiB: the roofline's sanity check (tests/gpu/test_roofline_gpu.py). Its bound is
2 GiB moved at the measured bandwidth; an honest copy kernel should come within 85% of it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clone()


def get_inputs():
    return [torch.randn(256, 1024, 1024)]


def get_init_inputs():
    return []
