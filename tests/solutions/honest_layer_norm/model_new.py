import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)  # parameters only

    def forward(self, x):
        return cuda_ext.layer_norm(x.contiguous(), self.norm.weight, self.norm.bias, self.norm.eps)
