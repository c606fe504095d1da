"""Cheat (confinement): memory in short bursts, from a thread that keeps running while the harness waits
on something else (@@MIB@@ MiB for half a second, again and again; the test sets a lower limit). A
watchdog that looks at the current resident memory now and then misses the bursts; the harness sums the
processes' peaks (VmHWM) and stops the candidate: -1."""
import threading
import time

import torch.nn as nn

import cuda_ext


def bursts():
    while True:
        hoard = bytearray(b"\1" * (int("@@MIB@@") << 20))
        time.sleep(0.5)
        del hoard
        time.sleep(2)


threading.Thread(target=bursts, daemon=True).start()


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_ext.ew(x.contiguous())
