"""The guards' building blocks on the CPU (sandbox/guards.py): what the integrity snapshot fingerprints and
notices, the dtype and device checks of the dispatch guard, and what poison_allocator hands the CUDA
allocator (its CUDA calls replaced by a recorder). The GPU suite shows them at work in a real evaluation;
these pin each piece, so that mutation testing (benchmarks/mutation.py) finds a test for each."""
import builtins
import sys
import threading
import time
import types

import pytest
import torch

from cuda_agent.sandbox import guards


# ----------------------------------------------------------------------------- fingerprints

def _f(x):
    return x + 1


def test_a_fingerprint_names_the_object_and_its_code():
    fp = guards._fingerprint(_f)
    ident, code_id, digest = fp.split(":")
    assert ident == str(id(_f)) and code_id == str(id(_f.__code__)) and len(digest) == 16
    assert guards._fingerprint(_f) == fp  # stable

    def g(x):
        return x + 1

    def h(x):
        return x + 2  # same bytecode, another constant

    saved = _f.__code__
    try:
        _f.__code__ = h.__code__  # the same function object with another body
        assert guards._fingerprint(_f) != fp
        assert guards._fingerprint(_f).split(":")[0] == ident
    finally:
        _f.__code__ = saved
    assert guards._fingerprint(g).split(":")[2] != guards._fingerprint(h).split(":")[2]  # co_consts count
    assert guards._fingerprint(_f) == fp


def test_a_bound_method_fingerprints_as_its_function_and_an_object_without_code_as_its_id():
    class C:
        def m(self):
            return 1

    c = C()
    assert guards._fingerprint(c.m) == guards._fingerprint(c.m) == guards._fingerprint(C.m)
    assert guards._fingerprint(len) == str(id(len))
    assert guards._fingerprint(None) == str(id(None))


# ----------------------------------------------------------------------------- the snapshot

def _own_module():
    mod = types.ModuleType("cuda_agent_test_own")

    def helper():
        return 1

    class Timer:
        def read(self):
            return 2

    mod.helper, mod.Timer, mod.LIMITS, mod.PAIR, mod.count = helper, Timer, frozenset({1}), (1, 2), 3
    Timer.__module__ = mod.__name__
    return mod


def test_the_snapshot_covers_the_watched_functions_builtins_and_own_modules():
    mod = _own_module()
    snap = guards.integrity_snapshot((mod,))
    for key in ("time.perf_counter", "torch.cuda.synchronize", "torch.Tensor.copy_", "torch.cuda.Event.record",
                "threading.Thread", "sys.settrace", "builtins.len", "cuda_agent_test_own.helper",
                "cuda_agent_test_own.Timer", "cuda_agent_test_own.Timer.read", "cuda_agent_test_own.LIMITS",
                "cuda_agent_test_own.PAIR", "sys.trace", "precision", "meta_path"):
        assert key in snap, key
    assert "cuda_agent_test_own.count" not in snap  # plain values are not fingerprinted
    assert snap["builtins.len"] == str(id(len))
    assert guards.integrity_diff(snap, guards.integrity_snapshot((mod,))) == []


def test_the_snapshot_leaves_out_a_class_imported_from_elsewhere_but_fingerprints_it():
    mod = _own_module()
    mod.Foreign = types.SimpleNamespace  # a class of another module, imported into this one
    snap = guards.integrity_snapshot((mod,))
    assert "cuda_agent_test_own.Foreign" in snap
    assert not any(k.startswith("cuda_agent_test_own.Foreign.") for k in snap)


@pytest.mark.parametrize("what", ["timer", "builtin", "own function", "own method", "trace", "thread trace",
                                  "precision", "meta_path", "tensor method"])
def test_the_snapshot_notices_each_kind_of_tampering(monkeypatch, what):
    mod = _own_module()
    profile, thread_trace = sys.getprofile(), threading.gettrace()
    if what == "precision" and hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # flipping allow_tf32 sets it
        monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", torch.backends.cuda.matmul.fp32_precision)
    snap = guards.integrity_snapshot((mod,))
    key = {"timer": "time.perf_counter", "builtin": "builtins.print", "own function": "cuda_agent_test_own.helper",
           "own method": "cuda_agent_test_own.Timer.read", "trace": "sys.trace", "thread trace": "sys.trace",
           "precision": "precision",
           "meta_path": "meta_path", "tensor method": "torch.Tensor.clone"}[what]
    if what == "timer":
        monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    elif what == "builtin":
        monkeypatch.setattr(builtins, "print", lambda *a, **k: None)
    elif what == "own function":
        mod.helper = lambda: 2
    elif what == "own method":
        mod.Timer.read = lambda self: 3
    elif what == "trace":
        sys.setprofile(lambda *a: None)
    elif what == "thread trace":  # what new threads will run under (threading.settrace)
        threading.settrace(lambda *a: None)
    elif what == "precision":
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", not torch.backends.cuda.matmul.allow_tf32)
    elif what == "meta_path":
        monkeypatch.setattr(sys, "meta_path", [object(), *sys.meta_path[1:]])  # one finder swapped, same length
    elif what == "tensor method":
        monkeypatch.setattr(torch.Tensor, "clone", lambda self, *a, **k: self)
    try:
        assert guards.integrity_diff(snap, guards.integrity_snapshot((mod,))) == [key]
    finally:
        sys.setprofile(profile)
        threading.settrace(thread_trace)


def test_the_precision_state_has_every_flag_that_changes_a_matmul():
    state = guards._precision_state()
    assert state == (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                     torch.get_float32_matmul_precision(),
                     torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                     torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)


def test_integrity_diff_lists_changed_and_removed_keys_in_order():
    before = {"b": "1", "a": "1", "c": "1"}
    assert guards.integrity_diff(before, {"a": "2", "b": "1"}) == ["a", "c"]
    assert guards.integrity_diff(before, dict(before)) == []


# ----------------------------------------------------------------------------- dispatch guard pieces

def test_dtype_and_device_changes_are_told_apart_from_copies_that_keep_them():
    f32, f64, meta = torch.empty(2), torch.empty(2, dtype=torch.float64), torch.empty(2, device="meta")
    assert guards._changes_dtype("copy_", (f32, f64), {}) and not guards._changes_dtype("copy_", (f32, f32), {})
    assert not guards._changes_dtype("copy_", (f32,), {}) and not guards._changes_dtype("copy_", (f32, 1.0), {})
    assert guards._changes_dtype("_to_copy", (f32,), {"dtype": torch.float16})
    assert not guards._changes_dtype("_to_copy", (f32,), {"dtype": torch.float32})
    assert not guards._changes_dtype("_to_copy", (f32,), {}) and not guards._changes_dtype("_to_copy", (), {})
    assert not guards._changes_dtype("clone", (f32, f64), {})
    assert guards._changes_device("copy_", (f32, meta), {}) and not guards._changes_device("copy_", (f32, f64), {})
    assert not guards._changes_device("copy_", (f32,), {}) and not guards._changes_device("copy_", (1.0, f32), {})
    assert guards._changes_device("_to_copy", (f32,), {"device": "meta"})
    assert guards._changes_device("_to_copy", (f32,), {"device": torch.device("meta")})
    assert not guards._changes_device("_to_copy", (f32,), {"device": "cpu"})
    assert not guards._changes_device("_to_copy", (f32,), {}) and not guards._changes_device("_to_copy", (), {})
    assert not guards._changes_device("clone", (f32, meta), {})


_LIBS: list = []  # kept alive: a Library that is collected takes its definitions with it


def test_the_candidates_own_operators_pass_and_other_namespaces_are_recorded():
    if not hasattr(torch.ops.cuda_ext, "guard_test_twice"):  # once per process (mutmut forks after a first run)
        _LIBS.append(lib := torch.library.Library("cuda_ext", "FRAGMENT"))  # the namespace a candidate's build uses
        lib.define("guard_test_twice(Tensor x) -> Tensor")
        lib.impl("guard_test_twice", lambda x: x + x, "CompositeExplicitAutograd")
    x = torch.randn(4)
    with guards.TorchOpGuard() as g:
        torch.ops.cuda_ext.guard_test_twice(x)
    assert g.violations == []  # its own op, even though it adds inside (the mode sees the outer call only)
    with guards.TorchOpGuard() as g:
        torch.ops.aten.add.Tensor(x, x)
        torch.ops.prims.mul(x, x)
    assert g.violations == ["aten.add.Tensor", "prims.mul.default"]


def test_settle_harness_runs_the_guard_once_so_torchs_lazy_setup_is_done_before_the_snapshot(monkeypatch):
    seen = []

    class Recording(guards.TorchOpGuard):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append((str(func), str(args[0].device) if args and isinstance(args[0], torch.Tensor) else None))
            return super().__torch_dispatch__(func, types, args, kwargs)

    monkeypatch.setattr(guards, "TorchOpGuard", Recording)
    guards.settle_harness(torch.device("meta"))  # on the device it is given (the worker's GPU)
    assert ("aten.zero_.default", "meta") in seen and any(f == "aten.empty.memory_format" for f, _ in seen), seen


# ----------------------------------------------------------------------------- poison_allocator

class _Recorder:
    """Stands in for torch in guards: records what poison_allocator allocates and fills."""

    OutOfMemoryError = torch.OutOfMemoryError
    uint8 = torch.uint8

    def __init__(self, free: int, oom_after: int | None = None):
        self.blocks: list = []
        self.live, self.live_at_alloc, self.asked = 0, [], []  # blocks alive when each allocation is asked for
        self.free, self.oom_after = free, oom_after
        self.cuda = types.SimpleNamespace(mem_get_info=lambda device: self.asked.append(device) or (self.free,
                                                                                                 8 * self.free))

    def empty(self, n, dtype=None, device=None):
        if self.oom_after is not None and len(self.blocks) >= self.oom_after:
            raise torch.OutOfMemoryError("out of memory")
        rec = self
        rec.live_at_alloc.append(rec.live)

        class Block:
            def __init__(self):
                rec.live += 1

            def fill_(self, value):
                rec.blocks.append((n, dtype, device, value))

            def __del__(self):
                rec.live -= 1

        return Block()


def test_poison_allocator_fills_two_blocks_per_output_and_a_large_one(monkeypatch):
    rec = _Recorder(free=64 << 20)
    monkeypatch.setattr(guards, "torch", rec)
    dev = types.SimpleNamespace(type="cuda")
    guards.poison_allocator(dev, [1, 0, 5 << 20, 2 << 30], budget_bytes=8 << 20)
    # each size within the budget twice (0 and the 2 GiB one skipped), then min(budget, free / 4)
    assert rec.blocks == [(1, torch.uint8, dev, 0xFF), (5 << 20, torch.uint8, dev, 0xFF),
                          (1, torch.uint8, dev, 0xFF), (5 << 20, torch.uint8, dev, 0xFF),
                          (8 << 20, torch.uint8, dev, 0xFF)]
    assert rec.asked == [dev]  # the free memory of the GPU being poisoned
    assert rec.live_at_alloc == [0, 1, 2, 3, 4] and rec.live == 0  # all held until the end, then all freed
    rec.blocks.clear()
    guards.poison_allocator(dev, [8 << 20], budget_bytes=64 << 20)  # the size at the budget is poisoned
    assert [b[0] for b in rec.blocks] == [8 << 20, 8 << 20, 16 << 20]  # free / 4 below the budget
    rec.blocks.clear()
    guards.poison_allocator(dev, [1 << 30, (1 << 30) + 1])  # the default budget: 1 GiB
    assert [b[0] for b in rec.blocks] == [1 << 30, 1 << 30, 16 << 20]
    rec.blocks.clear()
    rec.free = 3  # free // 4 == 0: no large block
    guards.poison_allocator(dev, [], budget_bytes=64 << 20)
    assert rec.blocks == []


def test_poison_allocator_stops_quietly_when_the_gpu_is_full_and_does_nothing_on_the_cpu(monkeypatch):
    rec = _Recorder(free=64 << 20, oom_after=1)
    monkeypatch.setattr(guards, "torch", rec)
    guards.poison_allocator(types.SimpleNamespace(type="cuda"), [100, 200], budget_bytes=1 << 30)
    assert [b[0] for b in rec.blocks] == [100]
    rec.blocks.clear()
    guards.poison_allocator(types.SimpleNamespace(type="cpu"), [100], budget_bytes=1 << 30)
    assert rec.blocks == []


def test_storage_overlap_and_bitwise_equality_at_their_edges():
    # ranges that only touch do not overlap, in either order; an empty range on either side overlaps nothing
    assert not guards.overlaps([(10, 20)], [(0, 10)]) and not guards.overlaps([(0, 10)], [(10, 20)])
    assert not guards.overlaps([(0, 10)], [(5, 5)]) and not guards.overlaps([(5, 5)], [(0, 10)])
    # the same bytes under another dtype are not the same tensor
    assert not guards.bitwise_equal(torch.zeros(4), torch.zeros(4, dtype=torch.int32))


def test_poison_allocator_poisons_even_a_one_byte_remainder(monkeypatch):
    rec = _Recorder(free=4)  # free // 4 == 1 byte
    monkeypatch.setattr(guards, "torch", rec)
    guards.poison_allocator(types.SimpleNamespace(type="cuda"), [], budget_bytes=64 << 20)
    assert [b[0] for b in rec.blocks] == [1]
