"""Tensors passed between the sandbox's processes without crossing the host.

On the GPU a tensor travels as a CUDA IPC descriptor: plain data (sizes, dtype, the allocation's IPC
handle) that another process opens as a view of the very same device memory. This is the mechanism
``torch.multiprocessing`` uses for CUDA tensors (``reductions.reduce_tensor`` / ``rebuild_cuda_tensor``),
taken here without its pickling, so that a reply stays plain data that ``torch.load(weights_only=True)``
reads. In a rehearsal (the CPU standing in for the GPU) a tensor travels by value instead.

An IPC handle opens the whole allocation (segment) a tensor lives in, not just the tensor. The trusted
side therefore exports only tensors it allocated in a pool of their own (:class:`Exporter`): what the
candidate can reach through a handle is the inputs it is given, never the reference's outputs or any
other memory of the trusted process.
"""

from __future__ import annotations

import contextlib

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor  # module level: in the snapshot

WEIGHTS = "weights"
"""The key of the reference's shared copy of its Model's state_dict, kept until the candidate has loaded it."""

_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


def export(t: torch.Tensor) -> dict:
    """A plain-data descriptor of ``t``; :func:`open_tensor` in another process gives the same memory."""
    if t.device.type != "cuda":
        return {"cuda": False, "value": t}
    _fn, args = reduce_tensor(t)
    (_cls, size, stride, offset, _storage_cls, dtype, device, handle, storage_bytes, storage_offset,
     _grad, ref_counter, ref_counter_offset, event, event_sync) = args
    return {"cuda": True, "size": list(size), "stride": list(stride), "offset": int(offset),
            "dtype": str(dtype).removeprefix("torch."), "device": int(device), "handle": handle,
            "storage_bytes": int(storage_bytes), "storage_offset": int(storage_offset),
            "ref_counter": ref_counter, "ref_counter_offset": int(ref_counter_offset), "event": event,
            "event_sync": bool(event_sync)}


def open_tensor(d: dict) -> torch.Tensor:
    """The tensor a descriptor from :func:`export` stands for (on the GPU: the exporter's memory itself)."""
    if not d.get("cuda"):
        return d["value"]
    return rebuild_cuda_tensor(torch.Tensor, torch.Size(d["size"]), tuple(d["stride"]), d["offset"],
                               torch.storage.TypedStorage, _DTYPES[d["dtype"]], d["device"], d["handle"],
                               d["storage_bytes"], d["storage_offset"], False, d["ref_counter"],
                               d["ref_counter_offset"], d["event"], d["event_sync"])


def collect(device: torch.device) -> None:
    """Free this process's exported blocks that the other process has released. An exported block that
    is freed stays in torch's IPC limbo until then, and is only reclaimed here (or when memory runs out):
    without this a 6 GiB task piles up one copy per trial."""
    if device.type == "cuda":
        torch.cuda.ipc_collect()


def export_tree(obj, keep: list | None = None):
    """An output (a tensor, or nested tuples/lists of tensors and Python scalars) as plain data. A tensor
    subclass or another object is sent as a description only (the evaluator rejects such outputs). With
    ``keep``, each tensor is first copied into memory the harness allocates and appends to ``keep`` (which
    must outlive the reading): the candidate holds no reference to what is judged, and an output in memory
    torch did not allocate (``from_blob``) can still be shared."""
    if type(obj) is torch.Tensor:
        t = obj.detach()
        if keep is not None:
            t = t.clone()
            keep.append(t)
        return {"tensor": export(t)}
    if isinstance(obj, (list, tuple)):
        return {type(obj).__name__ if type(obj) in (list, tuple) else "tuple": [export_tree(o, keep) for o in obj]}
    if isinstance(obj, (int, float, bool)) or obj is None:
        return {"value": obj}
    return {"value": f"<unsupported output type {type(obj).__module__}.{type(obj).__qualname__}>"}


def open_tree(d):
    if "tensor" in d:
        return open_tensor(d["tensor"])
    if "tuple" in d:
        return tuple(open_tree(x) for x in d["tuple"])
    if "list" in d:
        return [open_tree(x) for x in d["list"]]
    return d["value"]


class Exporter:
    """The trusted side's shared input sets: each a copy of a privately drawn set, allocated in a memory
    pool of its own (on the GPU), kept under a key; a set shared again under its key with ``reuse`` is
    written into the same buffers (the same addresses in the candidate's process too)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = torch.cuda.MemPool() if device.type == "cuda" else None
        self.sets: dict[str, list] = {}

    def _in_pool(self):
        return torch.cuda.use_mem_pool(self.pool) if self.pool is not None else contextlib.nullcontext()

    def share(self, key: str, values: list, reuse: bool = False) -> list[dict]:
        """Copy ``values`` (tensors and plain arguments) into shared buffers (those of set ``key`` when
        ``reuse``, else new ones, which replace it) and return their descriptors."""
        old = self.sets.pop(key, None)
        if reuse and old is not None and _alike(old, values):
            for b, v in zip(old, values):
                if isinstance(b, torch.Tensor):
                    b.copy_(v)
            bufs = [b if isinstance(b, torch.Tensor) else v for b, v in zip(old, values)]
        else:
            del old
            collect(self.device)  # blocks the other process has let go of are free again
            with self._in_pool():
                bufs = [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values]
        self.sets[key] = bufs
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the copies are done before the other process reads them
        return [{"tensor": export(b)} if isinstance(b, torch.Tensor) else {"value": b} for b in bufs]

    def drop(self, key: str) -> None:
        self.sets.pop(key, None)


class Importer:
    """The candidate's side: opens shared sets; a set opened again under its key with ``reuse`` is the
    same tensors (on the CPU, where a set travels by value, the new values are copied into them)."""

    def __init__(self) -> None:
        self.sets: dict[str, list] = {}

    def open_set(self, key: str, descriptors: list[dict], reuse: bool = False) -> list:
        values = [open_tree(d) for d in descriptors]
        old = self.sets.pop(key, None)
        if reuse and old is not None:
            values = [_reuse(o, v) for o, v in zip(old, values)]
        self.sets[key] = values
        return values

    def drop(self, key: str) -> None:
        self.sets.pop(key, None)


def _alike(old: list, new: list) -> bool:
    """Can ``new`` be written into the buffers of ``old``: as many values, tensors of the same shape and dtype?"""
    return len(old) == len(new) and all(
        (isinstance(o, torch.Tensor) == isinstance(n, torch.Tensor))
        and (not isinstance(o, torch.Tensor) or (o.shape == n.shape and o.dtype == n.dtype))
        for o, n in zip(old, new))


def _reuse(old, new):
    """The buffer of a reused set: on the GPU the exporter wrote into the memory the earlier tensor
    maps, so that is the new one; on the CPU the new values are copied into the earlier tensor."""
    if (not isinstance(old, torch.Tensor) or not isinstance(new, torch.Tensor) or old.shape != new.shape
            or old.dtype != new.dtype):
        return new
    if old.device.type == "cuda":
        return old if old.data_ptr() == new.data_ptr() else new
    old.copy_(new)
    return old
