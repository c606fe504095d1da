import torch
import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        cuda_ext.ew_inplace(x)
        return x
