"""Cheat (confinement), a single-file solution: its module-level code runs at build time (the build
executes the file for load_inline) and again in the worker. Both times it overwrites every artifact in
the harness's build cache (@@CACHE@@, written in by the test), so that another solution's verdict
would load this code. Confined, the cache is not there."""
import os

import torch
import torch.nn as nn

for root, _dirs, files in os.walk(os.path.join("@@CACHE@@", "build")):
    for name in files:
        try:
            with open(os.path.join(root, name), "r+b") as f:
                f.write(b"replaced")
        except OSError:
            pass


class ModelNew(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)
