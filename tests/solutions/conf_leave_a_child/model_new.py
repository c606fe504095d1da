"""Cheat (confinement): at import, leave a process behind that outlives the evaluation (in a session of
its own, where a kill of the worker's process group does not reach it), to disturb the evaluations that
follow. Here it only sleeps: ``sleep @@TAG@@``, which the test looks for afterwards. Confined, setsid is
refused, so the child stays in the worker's group, which the harness kills whole."""
import subprocess

import torch.nn as nn

import cuda_ext

try:
    subprocess.Popen(["sleep", "@@TAG@@"], start_new_session=True)
except (OSError, subprocess.SubprocessError):
    subprocess.Popen(["sleep", "@@TAG@@"])


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_ext.ew(x.contiguous())
