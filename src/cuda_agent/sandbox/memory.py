"""Memory an evaluation needs and uses: the task's own footprint, read without allocating it, and the
peaks each process of an evaluation reached (host RSS, GPU memory reserved by torch's allocator).

The footprint comes from running ``get_inputs()`` and, where every operator has a meta kernel,
``Model.forward`` on PyTorch's meta device: shapes and dtypes only, no memory. ``fit_problem`` names a
task that cannot fit on the GPU at all (the floor any evaluation needs, 2 x (input + output)) before
anything of it runs there; an evaluation's actual peak is several times that (see docs/sandbox.md).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

import torch

from .inputs import nbytes


@dataclass
class Footprint:
    input_bytes: int | None
    output_bytes: int | None
    """None when it could not be read on the meta device (e.g. an operator without a meta kernel)."""
    error: str | None = None

    def to_dict(self) -> dict:
        mib = 1 << 20
        return {"input_mib": None if self.input_bytes is None else round(self.input_bytes / mib, 1),
                "output_mib": None if self.output_bytes is None else round(self.output_bytes / mib, 1),
                **({"error": self.error} if self.error else {})}


def task_footprint(task_module, init_inputs: list) -> Footprint:
    """Bytes of one input set and of one output of the task, from the meta device."""
    try:
        with torch.device("meta"):
            inputs = list(task_module.get_inputs())
    except Exception as e:  # noqa: BLE001 - a task that builds its inputs on a named device, say
        return Footprint(None, None, f"get_inputs() on the meta device: {type(e).__name__}: {str(e)[:200]}")
    in_bytes = nbytes(inputs)
    try:
        with torch.device("meta"), torch.no_grad():
            out = task_module.Model(*init_inputs)(*inputs)
    except Exception as e:  # noqa: BLE001
        return Footprint(in_bytes, None, f"Model.forward on the meta device: {type(e).__name__}: {str(e)[:200]}")
    return Footprint(in_bytes, nbytes(out))


def fit_problem(fp: Footprint, gpu_bytes: int | None) -> str | None:
    """Why the task cannot be evaluated on a GPU of ``gpu_bytes`` at all, or None. The floor is what any
    evaluation holds at once: the reference's and the candidate's input set and output (2 x (in + out));
    a task above it cannot run side by side with its reference on one GPU, whatever the harness does."""
    if gpu_bytes is None or fp.input_bytes is None:
        return None
    out = fp.output_bytes or 0
    floor = 2 * (fp.input_bytes + out)
    if floor <= gpu_bytes:
        return None
    gib = 1 << 30
    return (f"the task does not fit on this GPU: one input set is {fp.input_bytes / gib:.1f} GiB and one output "
            f"{out / gib:.1f} GiB, so the reference and the candidate together need at least {floor / gib:.1f} GiB; "
            f"the GPU has {gpu_bytes / gib:.1f} GiB")


GPU_NEED = {"per_footprint": 8, "per_input": 9, "per_param": 3, "fixed_gib": 4}
"""What an evaluation is expected to hold on the GPU at its peak, reference and candidate workers together
(:func:`gpu_need`): the larger of 8 x (input + output) and 9 x input, plus 3 x the weights and 4 GiB. Fitted
above the peaks measured over KernelBench level 1 on an H200 (benchmarks/RESULTS.md): 5.3 to 7.4 x (input +
output) beyond 4 GiB on large tasks (trial sets and their copies for the mutation check, the timing ring, the
outputs, the poisoned allocations, the comparison's chunks, on both sides), up to 9 x input where the output
is small. The first evaluation on a GPU also measures its copy bandwidth, with buffers it sizes to a quarter
of the free memory."""


def gpu_need(input_bytes: int | None, output_bytes: int | None, param_bytes: int = 0) -> int | None:
    """The GPU memory an evaluation of a task of these sizes reserves before its trials (gpu.GpuMemory),
    by :data:`GPU_NEED`. None: the input's size is unknown (the evaluation then waits for the GPU to itself)."""
    if input_bytes is None:
        return None
    k, out = GPU_NEED, output_bytes or 0
    return (max(k["per_footprint"] * (input_bytes + out), k["per_input"] * input_bytes)
            + k["per_param"] * param_bytes + (k["fixed_gib"] << 30))


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM; since the last reset_peak_rss where Linux allows it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def others_share_mb() -> float | None:
    """The part of this process's resident set that its proportional set size (PSS) gives to the other
    processes mapping the same pages (``Rss - Pss`` in /proc/self/smaps_rollup, MiB): mostly the pages of
    torch's and CUDA's shared libraries, resident once however many of an evaluation's processes map them.
    None where Linux does not say. (A few ms to read: not for a timed path.)"""
    try:
        with open("/proc/self/smaps_rollup") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(("Rss:", "Pss:"))}
        return round((fields["Rss"] - fields["Pss"]) / 1024, 1)
    except (OSError, KeyError, ValueError, IndexError):
        return None


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (``oom_kill`` in
    /proc/vmstat), or None where the kernel does not say."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def reset_peak_rss() -> None:
    """Start this process's peak RSS afresh (Linux: ``5`` into /proc/self/clear_refs); a no-op elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_gpu_mb(device) -> float | None:
    if getattr(device, "type", None) != "cuda" or not torch.cuda.is_initialized():
        return None
    return round(torch.cuda.max_memory_reserved(device) / (1 << 20), 1)
