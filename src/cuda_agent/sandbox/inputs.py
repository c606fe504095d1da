"""Trial inputs, drawn from seeds the trusted evaluator chooses, by the trusted reference worker on the GPU.

Two kinds alternate: the task's own ``get_inputs()`` distribution, and *signed* inputs where
every floating tensor is replaced by standard-normal values of the same shape and dtype (so an
identity kernel cannot pass a ReLU task whose own inputs happen to be non-negative). Integer
and bool tensors (indices, masks) keep the task's values.
"""

from __future__ import annotations

from types import ModuleType

import torch

TASK = "task"
SIGNED = "signed"


def draw(task_module: ModuleType, seed: int, kind: str = TASK, device: torch.device | str | None = None) -> list:
    """One input set from ``seed``: the task's own ``get_inputs()`` run with ``device`` as the default
    device (the GPU in the trusted worker: a 16 GiB set is made where it is used, not on the host), or
    its signed variant. The same seed, kind and device give the same values."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    torch.manual_seed(seed)  # every generator, the GPU's included
    with torch.device(dev):
        inputs = list(task_module.get_inputs())
    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in inputs]
    if kind == SIGNED:
        g = torch.Generator(device=dev).manual_seed(seed + 7919)
        inputs = [torch.randn(x.shape, generator=g, dtype=torch.float32, device=dev).to(x.dtype)
                  if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    return [x.contiguous() if isinstance(x, torch.Tensor) else x for x in inputs]


def trial_plan(num_trials: int) -> list[tuple[str, bool]]:
    """(kind, reuse_previous_buffers) per trial: kinds alternate, later trials reuse buffers."""
    plan = []
    for i in range(num_trials):
        plan.append((TASK if i % 2 == 0 else SIGNED, i >= 2))
    return plan


def rotation_sets(set_bytes: int, budget_bytes: int, num_recheck: int) -> int:
    """How many input sets the timing loop rotates through: 2 to 4 while two fit ``budget_bytes`` (and
    at least one per post-timing re-check), else one. A set that large dwarfs the L2 cache, which is
    flushed before every call anyway, and the ring still rewrites its values before each call."""
    fit = budget_bytes // max(set_bytes, 1)
    if fit >= 2:
        return max(2, min(4, fit), num_recheck)
    return 1


def nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(nbytes(o) for o in obj.values())
    return 0


def leaf_sizes(obj) -> list[int]:
    if isinstance(obj, torch.Tensor):
        return [obj.numel() * obj.element_size()]
    if isinstance(obj, (list, tuple)):
        return [n for o in obj for n in leaf_sizes(o)]
    return []
