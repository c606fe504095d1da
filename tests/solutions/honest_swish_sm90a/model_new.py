import torch
import torch.nn as nn

import cuda_ext  # built by the sandbox from kernels/*.cu and kernels/*_binding.cpp


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.is_cuda and x.dtype == torch.float32, "swish kernel takes float32 CUDA tensors"
        return cuda_ext.swish(x.contiguous())
