"""A user's own module for `cuda-agent optimize --module` (GPU test): swish on whatever shape it gets."""
import torch
import torch.nn as nn


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)
