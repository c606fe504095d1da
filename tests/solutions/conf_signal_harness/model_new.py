"""Cheat (confinement): at import, SIGKILL a harness process (@@PID@@, written in by the test: a
stand-in it watches). Confined, that process is in another PID namespace (or, for a GPU worker that
shares the namespace, outside its Landlock domain): the signal cannot reach it."""
import os
import signal

import torch.nn as nn

import cuda_ext

try:
    os.kill(int("@@PID@@"), signal.SIGKILL)
except OSError:
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_ext.ew(x.contiguous())
