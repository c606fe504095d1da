"""Cheat (confinement): a candidate that would earn -1 exits with status 137 at import. bwrap reports a
child killed by signal N as 128 + N, so 137 would read as a SIGKILL from outside (the out-of-memory
killer), a harness error with a null reward instead of the candidate's -1. Confined, the process guard
kills the worker with SIGSYS instead: a crash, -1."""
import os

os._exit(137)

import torch.nn as nn  # noqa: E402 - never reached


class ModelNew(nn.Module):
    def forward(self, x):
        return x
