"""Cheat (confinement): a candidate that would earn -1 allocates host memory at import until the
out-of-memory killer ends it (here: @@MIB@@ MiB, held; the test sets a lower limit), to pass that SIGKILL
for the harness's trouble (a null reward). The harness watches the memory of the worker's processes and
stops it first: a runtime error, -1."""
import time

hoard = []
for _ in range(int("@@MIB@@") // 64):
    hoard.append(bytearray(b"\1" * (64 << 20)))
time.sleep(60)

import torch.nn as nn  # noqa: E402 - never reached in time


class ModelNew(nn.Module):
    def forward(self, x):
        return x
