"""Cheat (confinement): a candidate that would earn -1 fills memory that no process's RSS shows, files in
/dev/shm (@@MIB@@ MiB in /dev/shm/@@TAG@@; the test sets a lower limit), to provoke the out-of-memory
killer and pass its SIGKILL for the harness's trouble. A GPU worker's jail shares the host's /dev/shm
(CUDA IPC): the harness counts its growth as the candidate's memory and stops it first: -1. A jail of its
own PID namespace gets a private /dev/shm of 1 GiB."""
import time

with open("/dev/shm/@@TAG@@", "wb") as f:
    for _ in range(int("@@MIB@@") // 64):
        f.write(b"\1" * (64 << 20))
time.sleep(60)

import torch.nn as nn  # noqa: E402 - never reached in time


class ModelNew(nn.Module):
    def forward(self, x):
        return x
