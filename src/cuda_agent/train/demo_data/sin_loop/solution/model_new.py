import torch.nn as nn

import cuda_ext

ITERS = 64


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_ext.sin_loop(x.contiguous(), ITERS)
