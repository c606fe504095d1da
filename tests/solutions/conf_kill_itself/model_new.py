"""Cheat (confinement): a candidate that would earn -1 SIGKILLs itself at import, to pass for the
out-of-memory killer (a harness error, null reward). Confined, the process guard refuses SIGKILL even to
the worker itself: the import fails, -1."""
import os
import signal

os.kill(os.getpid(), signal.SIGKILL)

import torch.nn as nn  # noqa: E402 - never reached


class ModelNew(nn.Module):
    def forward(self, x):
        return x
