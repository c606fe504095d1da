"""Cheat (confinement): kernels/poison.cpp's static initializer runs when the library is loaded and
overwrites the cached baselines' file. Its other kernels are the honest rehearsal ones (the test
copies them in), and so is this forward."""
import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_ext.ew(x.contiguous())
