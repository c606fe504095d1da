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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_cap: str  # e.g. "9.0"
    uuid: str

    @property
    def arch(self) -> str:
        return self.compute_cap.replace(".", "")


@functools.cache
def list_gpus() -> tuple[GpuInfo, ...]:
    """The GPUs nvidia-smi reports, honoring CUDA_VISIBLE_DEVICES by index or UUID."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,compute_cap,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    gpus = []
    for line in out.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            gpus.append(GpuInfo(int(parts[0]), parts[1], parts[2], parts[3]))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        chosen = []
        for tok in (t.strip() for t in visible.split(",") if t.strip()):
            match = [g for g in gpus if str(g.index) == tok or g.uuid.startswith(tok)]
            chosen.extend(match[:1])
        gpus = [GpuInfo(i, g.name, g.compute_cap, g.uuid) for i, g in enumerate(chosen)]
    return tuple(gpus)


def gpu_info(device: int = 0) -> GpuInfo | None:
    gpus = list_gpus()
    return gpus[device] if 0 <= device < len(gpus) else None


def no_gpu_reason() -> str | None:
    """None when a CUDA GPU is usable here, else a plain sentence saying why not."""
    if not list_gpus():
        return ("no CUDA GPU found on this host (nvidia-smi lists none): correctness and timing need one. "
                "Static checks run anywhere: `cuda-agent check SOLUTION`.")
    return None


@contextlib.contextmanager
def gpu_lock(cache_dir: Path, device: int = 0) -> Iterator[None]:
    """Exclusive use of one GPU for timing, across processes (an flock on a per-GPU file)."""
    info = gpu_info(device)
    key = info.uuid if info else f"dev{device}"
    lock_dir = Path(cache_dir) / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"gpu-{key}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
