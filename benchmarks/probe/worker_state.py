"""Probe (GPU): does a task's eager time depend on what its process did or holds before it is timed?

    python3 benchmarks/probe/worker_state.py TASK.py [TASK.py ...] [--out $OUT/worker_state.json]

Why: in every calibration so far, KernelBench L1_33 (BatchNorm2d, training mode) came out at 1.077 and L1_78
(ConvTranspose2d) at 1.23-1.28 on two machines: eager timed in the reference's worker is slower than the same
Model timed in the candidate's. On L1_78 compile (17.45 ms) was as slow as eager (16.73) and the candidate 13.12.
The reference's worker differs in two ways before eager is timed: it has run torch.compile on the model, and it
holds more GPU memory (trial sets, its ring, the compiled graph's buffers). cuDNN picks an algorithm by what
workspace it can get, so either could change the kernels that run.

For each task, in one process, eager is timed (L2 flushed by a write of twice its size, CUDA events, median of
``--calls``) and its kernels listed (torch.profiler, one call) in these states, in this order:
  fresh; holding memory (free memory cut to ``--free-gib``); released; holding; released; after torch.compile ran
  once; eager again. (The first run, 2026-12-07 (5), held and released once only.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from cuda_agent.sandbox.timing import L2Flusher, time_once
from cuda_agent.tasks import load_task


def timed(fn, inputs, flush, n: int) -> float:
    """Median event ms of ``n`` calls, each timed as the sandbox times one (timing.time_once)."""
    return statistics.median(time_once(fn, inputs, flush)[0] for _ in range(n))


def kernels(fn, inputs) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn(*inputs)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(set(n[:120] for n in names))


def sm_clock_mhz() -> int | None:
    """The SM clock now (pynvml, through torch), to tell a clock or thermal change from a memory-state one."""
    try:
        return int(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 - no pynvml here
        return None


def state(name, fn, inputs, flush, n) -> dict:
    free, total = torch.cuda.mem_get_info()
    timed(fn, inputs, flush, max(n // 3, 3))  # warm-up in this state (the first timing otherwise carries clock ramp-up)
    clock_before = sm_clock_mhz()
    ms = timed(fn, inputs, flush, n)
    row = {"state": name, "ms": round(ms, 4), "sm_mhz": [clock_before, sm_clock_mhz()],
           "free_gib": round(free / 2**30, 1),
           "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 1), "kernels": kernels(fn, inputs)}
    print(f"  {name:10s} {ms:9.4f} ms  SM MHz {row['sm_mhz']}  free {row['free_gib']:6.1f} GiB  kernels "
          f"{row['kernels'][:3]}", flush=True)
    return row


def probe(path: str, free_gib: float, n: int) -> dict:
    # the sandbox's default precision (fp32, worker.set_precision): no TF32 in cuBLAS or cuDNN
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    task = load_task(path, validate=False).load_module()
    model = task.Model(*task.get_init_inputs()).cuda()
    with torch.device("cuda"):
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    flush = L2Flusher(torch.device("cuda"))
    print(path, flush=True)
    rows = []
    with torch.no_grad():
        model(*inputs)
        rows.append(state("fresh", model, inputs, flush, n))
        for _ in range(2):  # twice, alternating: a state's effect, not the order's (the first run held second only)
            free, _ = torch.cuda.mem_get_info()
            hold = max(int(free - free_gib * 2**30), 0)
            held = torch.empty(hold, dtype=torch.uint8, device="cuda") if hold else None
            rows.append(state("holding", model, inputs, flush, n))
            del held
            torch.cuda.empty_cache()
            rows.append(state("released", model, inputs, flush, n))
        compiled = torch.compile(model)
        compiled(*inputs)
        torch.cuda.synchronize()
        rows.append(state("compiled", compiled, inputs, flush, n))
        rows.append(state("eager after", model, inputs, flush, n))
    return {"task": path, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--free-gib", type=float, default=4.0)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--out")
    args = ap.parse_args()
    out = []
    for path in args.tasks:
        try:
            out.append(probe(path, args.free_gib, args.calls))
        except Exception as e:  # one task's failure is reported, the others still run
            print(f"{path}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            out.append({"task": path, "error": f"{type(e).__name__}: {e}"[:500]})
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "tasks": out}, f, indent=1)


if __name__ == "__main__":
    main()
