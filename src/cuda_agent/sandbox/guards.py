"""Dynamic guards, installed in the candidate worker before any candidate code is imported.

* :class:`TorchOpGuard`: a dispatch mode active during ``ModelNew.forward`` in correctness
  trials. It sees every ATen operator reached from Python *or* from C++ bindings that call
  ``at::`` functions, and records the ones that compute (only allocation, views, copies that
  keep the dtype, and the candidate's own ``cuda_ext`` operators are allowed).
* :func:`integrity_snapshot`: identities and code hashes of the functions the harness relies
  on (timers, synchronization, events, comparison helpers, builtins, this package's own
  functions) and the precision flags; compared after every phase to catch monkey-patching.
* :func:`poison_allocator`: fills the caching allocator's free memory with NaN bytes so an
  output that is never written cannot pass for a result.
* :func:`storages`: storage ranges, to check that outputs alias neither inputs nor earlier outputs.
"""

from __future__ import annotations

import builtins
import hashlib
import sys
import _thread
import threading
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ALLOWED_ATEN = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
new_ones full full_like new_full fill_ zero_ view _unsafe_view reshape _reshape_alias as_strided
permute transpose t expand squeeze unsqueeze slice select split split_with_sizes chunk unbind narrow
flatten unflatten alias detach lift_fresh lift_fresh_copy clone contiguous copy_ _to_copy view_as
expand_as movedim swapaxes resize_ sym_size sym_stride sym_numel sym_storage_offset is_contiguous
_has_compatible_shallow_copy_type set_ unfold diagonal view_as_real view_as_complex squeeze_ unsqueeze_
transpose_ t_ as_strided_ sym_is_contiguous is_non_overlapping_and_dense is_same_size size stride numel dim
""".split())
DTYPE_PRESERVING = frozenset({"copy_", "_to_copy", "clone"})
CANDIDATE_NAMESPACES = frozenset({"cuda_ext"})


class TorchOpGuard(TorchDispatchMode):
    """Records forbidden torch operators (it does not block them: the verdict does)."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ns = func.namespace
        base = func._schema.name.split("::", 1)[-1]
        if ns in CANDIDATE_NAMESPACES:
            pass
        elif ns == "aten" and base in ALLOWED_ATEN:
            if base in DTYPE_PRESERVING and _changes_dtype(base, args, kwargs):
                self._record(f"{func} (dtype conversion)")
            if base in DTYPE_PRESERVING and _changes_device(base, args, kwargs):
                self._record(f"{func} (copy between devices: compute stays on the GPU)")
        else:
            self._record(str(func))
        return func(*args, **kwargs)

    def _record(self, name: str) -> None:
        if name not in self.violations:
            self.violations.append(name)


def _changes_dtype(base: str, args, kwargs) -> bool:
    if base == "copy_" and len(args) >= 2 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor):
        return args[0].dtype != args[1].dtype
    if base == "_to_copy" and args and isinstance(args[0], torch.Tensor):
        dtype = kwargs.get("dtype")
        return dtype is not None and dtype != args[0].dtype
    return False


def _changes_device(base: str, args, kwargs) -> bool:
    if base == "copy_" and len(args) >= 2 and isinstance(args[0], torch.Tensor) and isinstance(args[1], torch.Tensor):
        return args[0].device != args[1].device
    if base == "_to_copy" and args and isinstance(args[0], torch.Tensor):
        device = kwargs.get("device")
        return device is not None and torch.device(device) != args[0].device
    return False


# ----------------------------------------------------------------------------- integrity

def _fingerprint(obj) -> str:
    obj = getattr(obj, "__func__", obj)  # bound methods are made afresh on each attribute access
    code = getattr(obj, "__code__", None)
    if code is not None:
        h = hashlib.sha1(code.co_code)
        h.update(repr(code.co_consts).encode(errors="replace"))
        return f"{id(obj)}:{id(code)}:{h.hexdigest()[:16]}"
    return f"{id(obj)}"


_WATCHED = {
    "time": (time, ("perf_counter", "perf_counter_ns", "time", "monotonic", "monotonic_ns", "sleep")),
    "torch": (torch, ("equal", "allclose", "empty", "empty_like", "no_grad", "save", "load")),
    "torch.cuda": (torch.cuda, ("synchronize", "Event", "current_stream", "Stream", "set_stream",
                                "empty_cache", "memory_allocated", "ipc_collect")),
    # the CUDA IPC machinery that carries outputs to the reference worker (share.py)
    "torch.UntypedStorage": (torch.UntypedStorage, ("_share_cuda_", "_new_shared_cuda")),
    "torch.storage.TypedStorage": (torch.storage.TypedStorage, ("_share_cuda_", "_new_shared_cuda")),
    "torch.cuda.Event": (torch.cuda.Event, ("record", "elapsed_time", "synchronize", "wait", "query")),
    "torch.Tensor": (torch.Tensor, ("cpu", "to", "clone", "copy_", "data_ptr", "__eq__", "equal",
                                    "untyped_storage", "contiguous", "view", "numel", "float",
                                    "__torch_function__", "__reduce_ex__", "zero_", "fill_", "mul_")),
    "torch.nn.Module": (torch.nn.Module, ("__call__", "_call_impl", "load_state_dict", "to", "cuda",
                                          "state_dict", "__getattr__", "__setattr__")),
    "threading": (threading, ("active_count", "enumerate", "Thread", "_start_new_thread", "_start_joinable_thread")),
    "_thread": (_thread, ("start_new_thread", "start_joinable_thread")),
    "sys": (sys, ("settrace", "setprofile", "gettrace", "getprofile", "exit")),
}


def count_thread_starts():
    """Count every Python thread started from now on; returns a reader of the count.

    threading.Thread, concurrent.futures and _thread all start threads through the functions
    wrapped here, so a thread that starts and ends inside one forward call is still counted
    (active_count() would miss it). Undoing the wrappers shows in the integrity snapshot.
    Installed once per process, before any candidate code is imported.
    """
    starts = [0]

    def wrap(orig):
        def start(*args, **kwargs):
            starts[0] += 1
            return orig(*args, **kwargs)
        return start

    for holder, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                         (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
        if hasattr(holder, name):
            setattr(holder, name, wrap(getattr(holder, name)))
    return lambda: starts[0]


def _precision_state() -> tuple:
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision(),
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)


def settle_harness(device) -> None:
    """Import and exercise, once, everything the harness itself uses later in the candidate's worker (the
    profiler, the dispatch guard), so that torch's own lazy rewiring happens before the snapshot. Not
    dynamo: the candidate's worker never compiles, importing it takes seconds, and importing or running
    it changes nothing the snapshot watches (tests/test_sandbox_edges.py pins that), so a candidate that
    imports it is not mistaken for one that tampered."""
    import torch.profiler  # noqa: F401

    with TorchOpGuard():
        torch.empty(1, device=device).zero_()


def integrity_snapshot(own_modules: tuple = ()) -> dict[str, str]:
    snap: dict[str, str] = {}
    for label, (holder, names) in _WATCHED.items():
        for name in names:
            snap[f"{label}.{name}"] = _fingerprint(getattr(holder, name, None))
    for name, obj in vars(builtins).items():
        snap[f"builtins.{name}"] = str(id(obj))
    for mod in own_modules:
        for name, obj in vars(mod).items():
            if callable(obj) or isinstance(obj, (type, frozenset, tuple)):
                snap[f"{mod.__name__}.{name}"] = _fingerprint(obj)
                if isinstance(obj, type) and obj.__module__ == mod.__name__:
                    for mname, meth in vars(obj).items():
                        if callable(meth):
                            snap[f"{mod.__name__}.{name}.{mname}"] = _fingerprint(meth)
    snap["sys.trace"] = repr((sys.gettrace(), sys.getprofile(), threading.gettrace()
                              if hasattr(threading, "gettrace") else None))
    snap["precision"] = repr(_precision_state())
    snap["meta_path"] = repr([id(m) for m in sys.meta_path])
    return snap


def integrity_diff(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before if after.get(k) != before[k])


# ----------------------------------------------------------------------------- memory

def poison_allocator(device: torch.device, sizes_bytes: list[int], budget_bytes: int = 1 << 30) -> None:
    """Hand the caching allocator blocks of the expected output sizes (and one large one) that
    are full of 0xFF bytes (NaN for floats), so fresh allocations start as garbage."""
    if device.type != "cuda":  # a rehearsal on the CPU
        return
    blocks = []
    try:
        for n in [*sizes_bytes, *sizes_bytes]:
            if 0 < n <= budget_bytes:
                b = torch.empty(n, dtype=torch.uint8, device=device)
                b.fill_(0xFF)
                blocks.append(b)
        free, _total = torch.cuda.mem_get_info(device)
        big = min(budget_bytes, free // 4)
        if big > 0:
            b = torch.empty(big, dtype=torch.uint8, device=device)
            b.fill_(0xFF)
            blocks.append(b)
    except torch.OutOfMemoryError:
        pass
    del blocks


def storages(obj) -> list[tuple[int, int]]:
    """(start, end) byte ranges of every tensor storage in a (nested) structure."""
    out = []
    if isinstance(obj, torch.Tensor):
        st = obj.untyped_storage()
        out.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            out.extend(storages(o))
    elif isinstance(obj, dict):
        for o in obj.values():
            out.extend(storages(o))
    return out


def overlaps(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b if e1 > s1 and e2 > s2)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality that treats NaN like any other bit pattern."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.contiguous(), b.contiguous()
    return bool(torch.equal(a.view(torch.uint8), b.view(torch.uint8))) if a.numel() else True
