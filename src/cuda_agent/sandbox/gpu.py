"""What GPU is here, and the lock that keeps timings from overlapping on it.

The evaluator asks ``nvidia-smi`` rather than initializing CUDA itself, so the trusted
process never holds a CUDA context it does not need.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


ARCH_SPECIFIC = {"9.0": "90a", "10.0": "100a"}
"""Compute capabilities built for their arch-specific target: ``sm_90a`` on Hopper (wgmma, TMA bulk tensor
copies, setmaxnreg) and ``sm_100a`` on Blackwell B200 (tcgen05, tensor memory). The fastest GEMM and attention
kernels need these instructions, and plain ``sm_90`` rejects them. An ``a`` build runs only on that very
capability, which is all an evaluation on this GPU needs. Every other GPU is built for its plain ``sm_XY``
(A100: sm_80, L40S: sm_89)."""


def build_arch(compute_cap: str) -> str:
    """The target the sandbox builds for on a GPU of ``compute_cap`` ("9.0" -> "90a", "8.0" -> "80")."""
    return ARCH_SPECIFIC.get(compute_cap, compute_cap.replace(".", ""))


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_cap: str  # e.g. "9.0"
    uuid: str
    memory_mb: int = 0
    """Total memory, MiB (0: not reported)."""

    @property
    def arch(self) -> str:
        """The build target for this GPU (:func:`build_arch`): "90a" on an H100/H200, "80" on an A100."""
        return build_arch(self.compute_cap)


@functools.cache
def list_gpus() -> tuple[GpuInfo, ...]:
    """The GPUs nvidia-smi reports, honoring CUDA_VISIBLE_DEVICES by index or UUID."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,compute_cap,uuid,memory.total",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) in (4, 5):
            mem = int(parts[4]) if len(parts) == 5 and parts[4].isdigit() else 0
            gpus.append(GpuInfo(int(parts[0]), parts[1], parts[2], parts[3], mem))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        chosen = []
        for tok in (t.strip() for t in visible.split(",") if t.strip()):
            match = [g for g in gpus if str(g.index) == tok or g.uuid.startswith(tok)]
            chosen.extend(match[:1])
        gpus = [GpuInfo(i, g.name, g.compute_cap, g.uuid, g.memory_mb) for i, g in enumerate(chosen)]
    return tuple(gpus)


def gpu_memory_bytes(device: int = 0) -> int | None:
    """Total memory of the GPU an evaluation will use, from nvidia-smi (None: unknown, e.g. a rehearsal)."""
    info = gpu_info(device)
    return info.memory_mb << 20 if info is not None and info.memory_mb else None


def gpu_info(device: int = 0) -> GpuInfo | None:
    gpus = list_gpus()
    return gpus[device] if 0 <= device < len(gpus) else None


REHEARSAL_ENV = "CUDA_AGENT_REHEARSAL"
"""Tests only: ``CUDA_AGENT_REHEARSAL=cpu`` runs an evaluation's whole choreography (workers, trials,
timing, checksums, re-check, verdict) on the CPU, with CPU kernels registered for the CPU, so that
CI exercises it without a GPU. Its timings are CPU timings and mean nothing; its verdicts say so."""


def rehearsal() -> bool:
    return os.environ.get(REHEARSAL_ENV) == "cpu"


def no_gpu_reason() -> str | None:
    """None when a CUDA GPU is usable here, else a plain sentence saying why not."""
    if rehearsal():
        return None
    if not list_gpus():
        return ("no CUDA GPU found on this host (nvidia-smi lists none): correctness and timing need one. "
                "Static checks run anywhere: `cuda-agent check SOLUTION`.")
    return None


class GpuLock:
    """A readers-writer lock on one GPU, across processes (flock on two files per GPU).

    Correctness work (trials, profiles) takes it *shared*: several evaluations may run their
    trials side by side. Timing takes it *exclusive*: nothing else runs on the GPU while eager,
    compile and the candidate are timed. A waiting timer holds the gate, so new sharers queue
    behind it and timing cannot starve. ``held_s`` accumulates the time this object held it.
    """

    def __init__(self, cache_dir: Path, device: int = 0):
        info = gpu_info(device)
        self.key = key = info.uuid if info else f"dev{device}"
        """Which GPU this lock is for (its UUID where nvidia-smi answers)."""
        lock_dir = Path(cache_dir) / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        self.main = lock_dir / f"gpu-{key}.lock"
        self.gate = lock_dir / f"gpu-{key}.gate"
        self.holds: list[tuple[float, float, bool]] = []
        """(start, end, exclusive) of every hold, in seconds since the epoch, so that holds of
        concurrent evaluations can be merged into the time the GPU was in use
        (benchmarks/bench_throughput.py)."""

    @property
    def held_s(self) -> float:
        return sum(end - start for start, end, _ in self.holds)

    @property
    def exclusive_s(self) -> float:
        return sum(end - start for start, end, exclusive in self.holds if exclusive)

    @property
    def intervals(self) -> list[tuple[float, float]]:
        return [(round(start, 3), round(end, 3)) for start, end, _ in self.holds]

    @contextlib.contextmanager
    def _held(self, main, exclusive: bool) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            self.holds.append((start, time.time(), exclusive))
            fcntl.flock(main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with open(self.gate, "a") as gate, open(self.main, "a") as main:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
            with self._held(main, exclusive=False):
                yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with open(self.gate, "a") as gate, open(self.main, "a") as main:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(main, fcntl.LOCK_EX)
            try:
                with self._held(main, exclusive=True):
                    yield
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)


def gpu_lock(cache_dir: Path, device: int = 0):
    """Exclusive use of one GPU (see :class:`GpuLock`)."""
    return GpuLock(cache_dir, device).exclusive()
