"""One timing method for eager, compile and candidate alike (run inside the workers).

Per iteration: refresh the input values in place (copy from a pristine set, scaled by a
factor unique to the iteration, so neither a pointer-keyed nor a content-keyed cache can
hit), flush L2 by writing a buffer twice its size, synchronize the whole device, then time
the call with CUDA events *and* the host clock, and synchronize the whole device again.

The events give the GPU figure; the host clock, which includes the device-wide
synchronization, sees work hidden on side streams or threads. ``gap_ms`` (wall minus GPU
for a trivial call, measured before any candidate code is imported) lets the evaluator tell
an honest launch/sync overhead from hidden work.
"""

from __future__ import annotations

import statistics
import time

import torch

_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_median = statistics.median


class InputRing:
    """R input sets resident on the GPU plus pristine copies to refresh them from."""

    def __init__(self, sets: list[list], device: torch.device):
        self.bufs = [[_to_device(x, device) for x in s] for s in sets]
        self.pristine = [[x.clone() if _is_float(x) else None for x in s] for s in self.bufs]
        self.step = 0

    def next(self) -> list:
        """The next input set, its float tensors rewritten with values no earlier call has seen."""
        k = self.step % len(self.bufs)
        self.step += 1
        scale = 1.0 - 1e-5 * ((self.step % 4093) + 1)  # < 1: keeps [0, 1] inputs in range
        for buf, src in zip(self.bufs[k], self.pristine[k]):
            if src is not None:
                buf.copy_(src).mul_(scale)
        return self.bufs[k]

    def overwrite(self, sets: list[list]) -> list[list]:
        """Write new values into the very same buffers (same addresses) and return them."""
        for bufs, new in zip(self.bufs, sets):
            for buf, x in zip(bufs, new):
                if isinstance(buf, torch.Tensor):
                    buf.copy_(x)
        return self.bufs


def _is_float(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _to_device(x, device):
    return x.to(device).contiguous() if isinstance(x, torch.Tensor) else x


class L2Flusher:
    def __init__(self, device: torch.device):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) or (50 << 20)
        self.buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buf.zero_()


def time_once(fn, inputs: list, flush: L2Flusher) -> tuple[float, float]:
    """(gpu_ms, wall_ms) of one call."""
    flush()
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _synchronize()
    t0 = _perf_counter()
    start.record()
    out = fn(*inputs)
    end.record()
    _synchronize()
    t1 = _perf_counter()
    del out
    return start.elapsed_time(end), (t1 - t0) * 1e3


def measure_gap(device: torch.device, flush: L2Flusher, n: int = 50) -> float:
    """Median (wall - gpu) of a trivial one-kernel call: the honest harness overhead."""
    x = torch.empty(1024, device=device)
    fn = x.add_
    samples = []
    for _ in range(n):
        g, w = time_once(lambda: fn(1.0), [], flush)
        samples.append(w - g)
    return _median(samples)


def plan_iterations(fn, ring: InputRing, flush: L2Flusher, warmup_ms: float, rep_ms: float,
                    min_iters: int, max_iters: int, settle_tol: float = 0.01,
                    max_warmup_ms: float = 1000.0) -> tuple[int, float, dict]:
    """Warm up and choose the iteration count. Returns (n_iters, estimated ms per call, warm-up record).

    The warm-up lasts at least ``warmup_ms`` of GPU time and then goes on, window by window,
    until the median of a window is within ``settle_tol`` of the window before it (the GPU's
    clocks have left their idle state and settled), for at most ``max_warmup_ms``. A GPU that
    idled between two evaluations otherwise times its first calls at lower clocks.
    """
    est = []
    for _ in range(3):
        g, _w = time_once(fn, ring.next(), flush)
        est.append(g)
    per_call = max(_median(est), 1e-3)
    window = int(min(max(5, 10.0 / per_call), 50))
    spent, calls, prev, cur, settled = sum(est), 3, None, per_call, False
    while calls < max_iters and spent < max_warmup_ms:
        samples = [time_once(fn, ring.next(), flush)[0] for _ in range(window)]
        calls += window
        spent += sum(samples)
        cur = _median(samples)
        if prev is not None and spent >= warmup_ms and abs(cur - prev) <= settle_tol * cur:
            settled = True
            break
        prev = cur
    per_call = max(cur, 1e-3)
    n_iters = int(min(max(rep_ms / per_call, min_iters), max_iters))
    return n_iters, per_call, {"warmup_calls": calls, "warmup_ms": round(spent, 3), "settled": settled}


def run_timed(fn, ring: InputRing, flush: L2Flusher, n_iters: int) -> dict:
    gpu, wall = [], []
    for _ in range(n_iters):
        g, w = time_once(fn, ring.next(), flush)
        gpu.append(g)
        wall.append(w)
    return {"gpu_ms": gpu, "wall_ms": wall, "n": n_iters,
            "gpu_median_ms": _median(gpu), "wall_median_ms": _median(wall)}
