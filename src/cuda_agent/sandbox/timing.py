"""One timing method for eager, compile and candidate alike (run inside the workers).

Per iteration: refresh the input values in place (copy from a pristine set, scaled by a
factor unique to the iteration and spread over [0.5, 1), so neither a pointer-keyed nor a
content-keyed cache can hit, and an output kept from an earlier call is off by percents),
flush L2 by writing a buffer twice its size, synchronize the whole device, then time the
call with CUDA events *and* the host clock, and synchronize the whole device again.

For the candidate, every timed call's output is also reduced, after the timed window, to a
checksum (a dot product with random +-1 weights chosen by the evaluator, and the squared
norm); the reference recomputes the same checksums on the same inputs, so a candidate that
computes correctly only while it is checked, and not while it is timed, is caught.

The events give the GPU figure; the host clock, which includes the device-wide
synchronization, sees work hidden on side streams or threads. ``gap_curve`` (wall minus GPU
for a trivial call and for spin kernels of a few lengths, measured before any candidate code is
imported) lets the evaluator tell an honest launch/sync overhead from hidden work.
"""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import torch

from .gpu import rehearsal
from .verdict import host_bound_shares

_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_median = statistics.median


class _HostEvent:
    """CPU stand-in for torch.cuda.Event in a rehearsal (gpu.REHEARSAL_ENV): host clock only."""

    def __init__(self, enable_timing: bool = True):
        self.t = 0.0

    def record(self) -> None:
        self.t = _perf_counter()

    def elapsed_time(self, other: "_HostEvent") -> float:
        return (other.t - self.t) * 1e3


def _no_sync() -> None:
    pass


if rehearsal():
    _synchronize, _Event = _no_sync, _HostEvent


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
        scale = refresh_scale(self.step)
        for buf, src in zip(self.bufs[k], self.pristine[k]):
            if src is not None:
                buf.copy_(src).mul_(scale)
        return self.bufs[k]

    def overwrite(self, sets: list[list]) -> list[list]:
        """Write new values into the very same buffers (same addresses) and return them; a plain number
        (a float beside the tensors, as in KernelBench L1_5) is the new set's own."""
        for bufs, new in zip(self.bufs, sets):
            for i, x in enumerate(new[: len(bufs)]):
                if isinstance(bufs[i], torch.Tensor):
                    bufs[i].copy_(x)
                else:
                    bufs[i] = x
        return self.bufs


def refresh_scale(step: int) -> float:
    """The factor of the step-th refresh: in [0.5, 1) (keeps [0, 1] and positive inputs in range),
    never the same twice, consecutive and nearby steps far apart (golden-ratio sequence)."""
    return 0.5 + 0.5 * ((step * 0.6180339887498949) % 1.0)


class OutputChecksum:
    """Two numbers per output, computed on the GPU without synchronizing: the dot product of
    the flattened output with random +-1 weights (seeded; both workers draw the same ones),
    and its squared L2 norm. Outputs of different inputs differ in the first by about their
    norm; correct outputs by about the comparison tolerance times it.

    Memory stays a small fraction of the output's: the sums run over chunks of ``CHUNK`` elements in
    float64, and the weights of an output longer than one chunk are kept as int8 signs (1 byte an element,
    not 8). A float64 copy of a whole 6 GiB output and its float64 weights took 24 GiB and ran a reference
    out of memory on an 80 GB GPU (KernelBench L1_19)."""

    CHUNK = 1 << 24  # elements: a float64 chunk is 128 MiB

    def __init__(self, seed: int, device: torch.device):
        self.seed, self.device = seed, device
        self._weights: dict[int, torch.Tensor] = {}

    def _draw(self, n: int) -> torch.Tensor:
        """The ``n`` weights as int8 0/1 (a weight is 2 x this - 1), drawn from the seed and ``n``."""
        g = torch.Generator(device=self.device)
        g.manual_seed((self.seed * 1_000_003 + n) % (1 << 62))
        return torch.randint(0, 2, (n,), generator=g, device=self.device, dtype=torch.int8)

    def _kept(self, n: int) -> torch.Tensor:
        w = self._weights.get(n)
        if w is None:
            bits = self._draw(n)
            w = _plus_minus_one(bits) if n <= self.CHUNK else bits
            self._weights[n] = w
        return w

    def weights(self, n: int) -> torch.Tensor:
        """All ``n`` weights, +-1 in float64."""
        return _plus_minus_one(self._kept(n))

    def __call__(self, out) -> torch.Tensor:
        acc = torch.zeros(2, dtype=torch.float64, device=self.device)
        for leaf in (x for x in leaves(out) if isinstance(x, torch.Tensor)):
            if leaf.is_complex():  # both parts: a cast to float64 would drop the imaginary one
                leaf = torch.view_as_real(leaf.resolve_conj())
            flat = leaf.detach().reshape(-1)
            n = flat.numel()
            w = self._kept(n)
            for i in range(0, n, self.CHUNK):
                v = flat[i:i + self.CHUNK].to(self.device, torch.float64)
                acc[0] += torch.dot(v, _plus_minus_one(w[i:i + self.CHUNK]))
                acc[1] += torch.dot(v, v)
        return acc


def _plus_minus_one(w: torch.Tensor) -> torch.Tensor:
    """Checksum weights as +-1 in float64: kept int8 0/1 signs are converted, float64 weights are as they are."""
    return w if w.dtype == torch.float64 else w.double() * 2 - 1


def leaves(obj):
    """The leaves of a (nested) list/tuple output, in order."""
    if isinstance(obj, (list, tuple)):
        for o in obj:
            yield from leaves(o)
    else:
        yield obj


def checksums(fn, ring: InputRing, n: int, checksum: OutputChecksum) -> list[list[float]]:
    """The reference side: the checksums of ``n`` calls on the ring's next ``n`` input sets."""
    acc = torch.empty(n, 2, dtype=torch.float64, device=checksum.device)
    for i in range(n):
        acc[i] = checksum(fn(*ring.next()))
    _synchronize()
    return acc.cpu().tolist()


def _is_float(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _to_device(x, device):
    return x.to(device, copy=True).contiguous() if isinstance(x, torch.Tensor) else x  # never the caller's tensor


class L2Flusher:
    def __init__(self, device: torch.device):
        l2 = (getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) or (50 << 20)
              if device.type == "cuda" else 1 << 20)
        self.buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buf.zero_()


def time_once(fn, inputs: list, flush: L2Flusher, after=None, issue: list | None = None) -> tuple[float, float]:
    """(gpu_ms, wall_ms) of one call. ``after(out)`` runs once the call is timed (the checksum). ``issue``: a list
    the host's time to issue the call (ms, from before the start event to after the end event is recorded, no
    sync) is appended to (see HOST_BOUND)."""
    flush()
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _synchronize()
    t0 = _perf_counter()
    start.record()
    out = fn(*inputs)
    end.record()
    if issue is not None:
        issue.append((_perf_counter() - t0) * 1e3)
    _synchronize()
    t1 = _perf_counter()
    if after is not None:
        after(out)
    del out
    return start.elapsed_time(end), (t1 - t0) * 1e3


GAP_LADDER_MS = (0.1, 0.3, 1.0, 3.0)
"""GPU lengths (ms) of the spin calls ``gap_curve`` measures the honest overhead at, besides the trivial call.
The overhead grows with the call's length: on an H100 the host clock saw 0.015-0.027 ms more than the events for
a 20-30 us add and 0.021-0.065 ms for a 2.4-2.8 ms spin (RESULTS.md, 2026-12-07 (5)), and honest kernels of
0.15-0.2 ms 0.035-0.06 ms, so one figure from the trivial call flagged honest kernels of 0.1-1 ms (the sm_90a test). A
memory-bound kernel in a slow placement can still exceed the spin kernels' figure (not modelled yet)."""


def gap_curve(device: torch.device, flush: L2Flusher, n: int = 50,
              ladder: tuple = GAP_LADDER_MS) -> list[list[float]]:
    """The honest harness overhead against the call's length: ``[[gpu_ms, gap_ms], ...]`` ascending, the
    medians of ``n`` calls of a trivial in-place add on ``device`` and, on a GPU, of spin kernels
    (``torch.cuda._sleep``) of about each ``ladder`` length. No ladder, a rehearsal, or a torch without ``_sleep``:
    the trivial point only."""
    add = torch.empty(1024, device=device).add_
    curve = [_gap_point(lambda: add(1.0), flush, n)]
    sleep = getattr(torch.cuda, "_sleep", None)
    if not ladder or device.type != "cuda" or sleep is None or rehearsal():
        return curve
    cycles_per_ms = spin_cycles_per_ms(flush)
    for ms in ladder:
        curve.append(_gap_point(lambda c=int(ms * cycles_per_ms): sleep(c), flush, max(n // 2, 5)))
    return sorted(curve)


def spin_cycles_per_ms(flush: L2Flusher) -> float:
    """The GPU clock's cycles per ms for ``torch.cuda._sleep``, from the median of three 200k-cycle spins."""
    probe = sorted(time_once(lambda: torch.cuda._sleep(200_000), [], flush)[0] for _ in range(3))[1]
    return 200_000 / max(probe, 1e-3)


def _gap_point(fn, flush: L2Flusher, n: int) -> list[float]:
    """[median gpu ms, median (wall - gpu) ms] of ``n`` timed calls of ``fn``."""
    gpu, gaps, issue = [], [], []
    for _ in range(n):
        g, w = time_once(fn, [], flush, None, issue)  # the timed loop's own path (run_timed), clock read and all
        gpu.append(g)
        gaps.append(w - g)
    return [_median(gpu), _median(gaps)]


GAP_SLACK_MS = 0.1
"""The most a candidate's honest overhead (read off its own gap curve) may exceed the reference worker's gap on a
trivial call by. On an H100 the excess was at most 0.045 ms (a 2.7 ms spin) and 0.034 ms (a memory-bound kernel's
slow mode; RESULTS.md, 2026-12-07 (5)): this is about twice that. It bounds what a candidate gains by rewriting
its curve, which its worker reports after the candidate's code is loaded."""

GAP_CURVE_MAX_POINTS = 16
"""The most points a gap curve may have (the trivial call and GAP_LADDER_MS: 5)."""


def valid_curve(curve) -> list[list[float]] | None:
    """``curve`` as the harness sends it, a list of at most GAP_CURVE_MAX_POINTS [length, gap] pairs of finite
    real numbers (no bools), as floats; anything else (a tampered reply) is None."""
    if not isinstance(curve, list) or not 0 < len(curve) <= GAP_CURVE_MAX_POINTS:
        return None
    out = []
    for p in curve:
        if not isinstance(p, (list, tuple)) or len(p) != 2:
            return None
        try:
            pair = [float(x) for x in p if isinstance(x, (int, float)) and not isinstance(x, bool)]
        except OverflowError:  # an int too large for a float
            return None
        if len(pair) != 2 or not all(math.isfinite(x) for x in pair):
            return None
        out.append(pair)
    return out


def gap_at(curve, gpu_ms: float, cap: float | None = None) -> float:
    """The honest overhead of a call of ``gpu_ms`` on ``curve`` (``gap_curve``): linear between its points,
    flat beyond its ends (``numpy.interp``), and at most ``cap``. A curve that is not ``valid_curve`` (a
    tampered reply), or a length that is no finite number, allows no overhead at all: the strictest reading,
    which can only hurt the worker that sent it."""
    pts = valid_curve(curve)
    if pts is None or not isinstance(gpu_ms, (int, float)) or isinstance(gpu_ms, bool):
        return 0.0
    pts.sort()
    try:
        gap = float(np.interp(float(gpu_ms), [g for g, _ in pts], [d for _, d in pts]))
    except OverflowError:
        return 0.0
    if not math.isfinite(gap):
        return 0.0
    return gap if cap is None else min(gap, cap)


HOST_BOUND = 0.7
"""A call whose host issue time (``time_once``'s ``issue``) is at least this share of its GPU time is host-bound:
the GPU started idle (``time_once`` synchronizes first) and waited for the host, to launch the call's kernels or
at a synchronization inside the call, so its events measure the host as much as the GPU. On the H100 device
the launch-bound models KernelBench L3_23 and L3_19 (hundreds of small kernels) ran 2.6-3.3 and 3.0-3.2 ms in
fresh processes and drifted by up to 2.2x and 2.5x inside one process, their launch time (the call alone, host
clock) 0.74-1.04 of their GPU time throughout (RESULTS.md, Sandbox). No evaluation of such a call repeats to
within a few percent on a host like that. An asynchronous GPU-bound call issues in microseconds: its share is
near 0. (The threshold comes from that probe's measure; the verdict's share reads the same clock inside the
timed loop.)"""


def host_bound_share(issue_ms, gpu_ms) -> float | None:
    """The host's issue time over the GPU time of a call (medians), or None when either is not a positive
    finite number (a worker that sent none, or a tampered reply). At or above HOST_BOUND: host-bound."""
    # the range first: math.isfinite raises on an int too large for a float, which a tampered reply may hold
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1e12 and math.isfinite(x)
             for x in (issue_ms, gpu_ms))
    share = issue_ms / gpu_ms if ok else math.nan
    return round(share, 3) if math.isfinite(share) and share < 1e6 else None


def host_bound_line(block) -> str | None:
    """One line for the agent and ``eval``'s summary when a verdict's ``timing.host_bound`` says the candidate's or
    eager's call was host-bound, e.g. "host-bound: the host took 96% of your call's GPU time to issue it (eager:
    98%) ..."; None otherwise (or for a block that is not one)."""
    parsed = host_bound_shares(block)
    if parsed is None or not any(x >= parsed[1] for x in parsed[0].values()):
        return None
    shares, t = parsed
    mine = shares.get("candidate")
    eager = f"eager: {shares['eager']:.0%}" if "eager" in shares else None
    if mine is not None and mine >= t:
        return (f"host-bound: the host took {mine:.0%} of your call's GPU time to issue it"
                + (f" ({eager})" if eager else "") + f". At {t:.0%} or more the GPU waits for the host (kernel "
                "launches, or a synchronization inside the call), so the time follows the host's speed and varies "
                "between runs: launch fewer kernels (fuse them, or replay one CUDA graph) and do not synchronize")
    return (f"host-bound eager: its launch took {shares['eager']:.0%} of its GPU time"
            + (f" (yours: {mine:.0%})" if mine is not None else "") + ", so eager's time, and with it your "
            "speed-up vs eager, moves with the host's speed between runs")


MIN_TIMED_CALLS = 3
"""Fewest timed calls of any measurement, however long the kernel (the median needs three)."""


def plan_iterations(fn, ring: InputRing, flush: L2Flusher, warmup_ms: float, rep_ms: float,
                    min_iters: int, max_iters: int, settle_tol: float = 0.01,
                    max_warmup_ms: float = 1000.0, max_window_ms: float | None = None) -> tuple[int, float, dict]:
    """Warm up and choose the iteration count. Returns (n_iters, estimated ms per call, warm-up record).

    The count fills ``rep_ms`` within [min_iters, max_iters], but the timed window never exceeds
    ``max_window_ms`` (a 50 ms kernel is timed MIN_TIMED_CALLS to 20 times, not min_iters at any cost).

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
    n_iters = iteration_count(per_call, rep_ms, min_iters, max_iters, max_window_ms)
    return n_iters, per_call, {"warmup_calls": calls, "warmup_ms": round(spent, 3), "settled": settled}


def iteration_count(per_call_ms: float, rep_ms: float, min_iters: int, max_iters: int,
                    max_window_ms: float | None = None) -> int:
    """Calls to time: enough to fill ``rep_ms`` within [min_iters, max_iters], and no more than fit
    ``max_window_ms``, but never fewer than MIN_TIMED_CALLS."""
    per_call_ms = max(per_call_ms, 1e-3)
    n = int(min(max(rep_ms / per_call_ms, min_iters), max_iters))
    if max_window_ms is not None:
        n = min(n, int(max_window_ms / per_call_ms))
    return max(n, MIN_TIMED_CALLS)


def run_timed(fn, ring: InputRing, flush: L2Flusher, n_iters: int, checksum: OutputChecksum | None = None) -> dict:
    gpu, wall, issue = [], [], []
    start_step = ring.step
    acc = torch.empty(n_iters, 2, dtype=torch.float64, device=checksum.device) if checksum is not None else None
    for i in range(n_iters):
        after = (lambda out, i=i: acc[i].copy_(checksum(out))) if checksum is not None else None
        g, w = time_once(fn, ring.next(), flush, after, issue)
        gpu.append(g)
        wall.append(w)
    res = {"gpu_ms": gpu, "wall_ms": wall, "n": n_iters,
           "gpu_median_ms": _median(gpu), "wall_median_ms": _median(wall)}
    if issue:
        res["issue_median_ms"] = _median(issue)
    if acc is not None:
        _synchronize()
        res["checksums"], res["start_step"] = acc.cpu().tolist(), start_step
    return res
