"""A task whose torch.compile baseline cannot be had: compiling its Model ends the process that compiles it
(Dynamo cannot trace ``os._exit`` and so runs it). Its eager Model is an ordinary Linear, with weights, so the
candidate must load them from the reference worker that replaced the dead one."""
import os

import torch
import torch.nn as nn

rows = 256
features = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        if torch.compiler.is_compiling():
            os._exit(7)
        return self.fc(x)


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return []
