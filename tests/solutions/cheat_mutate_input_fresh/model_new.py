import torch
import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    """Computes the right answer into a fresh tensor, then overwrites its input in place (for example to
    save memory): only the input-mutation check can catch it, since the output aliases nothing."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = cuda_ext.ew(x.contiguous())
        cuda_ext.ew_inplace(x)
        return out
