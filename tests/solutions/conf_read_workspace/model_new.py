"""Cheat (confinement): at import, read another workspace's files (@@OTHER@@, written in by the test)
and smuggle them out through an error message. Confined, the other workspace is not there, and the
honest kernels (copied in by the test) run."""
import torch.nn as nn

import cuda_ext

try:
    with open("@@OTHER@@/model_new.py") as f:
        leaked = f.read()
except OSError:
    leaked = None
if leaked is not None:
    raise RuntimeError("LEAKED " + leaked)


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_ext.ew(x.contiguous())
