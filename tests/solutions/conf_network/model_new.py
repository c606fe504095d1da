"""Cheat (confinement): at import, call out over the network (@@PORT@@ on the loopback address: a
listener the test runs and counts connections on; an attacker would fetch a kernel, or report home).
Confined, the worker has a network namespace of its own: nothing listens there."""
import socket

import torch.nn as nn

import cuda_ext

try:
    with socket.create_connection(("127.0.0.1", int("@@PORT@@")), timeout=5) as s:
        s.sendall(b"hello from the candidate")
except OSError:
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        return cuda_ext.ew(x.contiguous())
