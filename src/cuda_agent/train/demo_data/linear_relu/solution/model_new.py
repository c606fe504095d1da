import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # holds the weights; never called

    def forward(self, x):
        return cuda_ext.linear_relu(x.contiguous(), self.linear.weight, self.linear.bias)
