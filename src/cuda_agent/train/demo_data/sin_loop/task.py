"""An iterated map, x <- 0.9 sin(x) + 0.1, 64 times: compute-bound when fused (about 1 ms on an H200),
192 small kernels in eager. Used to tell the harness's timing spread from one kernel's
(benchmarks/sandbox_speed.py --repeat-extra)."""
import torch
import torch.nn as nn

rows = 4096
cols = 4096
iters = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        for _ in range(iters):
            x = torch.sin(x) * 0.9 + 0.1
        return x


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
