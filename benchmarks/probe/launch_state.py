"""Probe (GPU): is a launch-bound model's time set by what its process did before it is timed?

    python3 benchmarks/probe/launch_state.py TASK.py [TASK.py ...] [--processes 3] [--out $OUT/launch_state.json]

Why: KernelBench's small-batch CNNs (L3_19 MobileNetV1, L3_20 MobileNetV2, L3_23 EfficientNetB1) miss calibration:
the candidate worker's time of the task's own Model was 0.59-0.70 of the reference worker's eager on L3_23 in all four
evaluations of the launch-bound stage (one lane, confined and unconfined alike; RESULTS.md, Sandbox), i.e. the
candidate slower. These models are launch-bound: with the GPU idle at the start event (timing.time_once synchronizes
first), the events measure how fast the host issues ~100-300 kernels. So anything that makes each torch op dearer on
the host in one worker and not the other moves the figure. The two workers differ before timing in what ran in
them: the candidate's correctness trials run under a TorchDispatchMode (guards.TorchOpGuard); the reference ran
torch.compile on the model (op_compile); the kernel census runs a kineto trace.

Each fresh process times eager (flushed, CUDA events, as the sandbox does; median of ``--calls``) in these states, in
this order: fresh; after one call under TorchOpGuard; after one call under the census's kineto trace; after
torch.compile ran once. Per state: gpu ms (events), wall ms (host clock with a device-wide sync), and launch ms
(the host time of the call alone, before the sync: what the host spends issuing it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def child(path: str, calls: int) -> dict:
    import torch

    from cuda_agent.sandbox.guards import TorchOpGuard
    from cuda_agent.sandbox.timing import L2Flusher, time_once
    from cuda_agent.sandbox.worker import set_precision
    from cuda_agent.tasks import load_task

    set_precision("fp32")
    torch.manual_seed(0)
    task = load_task(path, validate=False).load_module()
    model = task.Model(*task.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    flush = L2Flusher(torch.device("cuda"))

    def launch_ms(fn) -> float:
        flush()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*inputs)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        return (t1 - t0) * 1e3

    def state(fn) -> dict:
        for _ in range(5):
            time_once(fn, inputs, flush)
        s = [time_once(fn, inputs, flush) for _ in range(calls)]
        return {"gpu_ms": round(statistics.median(g for g, _ in s), 4),
                "wall_ms": round(statistics.median(w for _, w in s), 4),
                "launch_ms": round(statistics.median(launch_ms(fn) for _ in range(calls)), 4)}

    out = {}
    with torch.no_grad():
        out["fresh"] = state(model)
        with TorchOpGuard():
            model(*inputs)
        out["after guard"] = state(model)
        with torch.autograd.profiler.profile(use_cpu=False, use_device="cuda", use_kineto=True):
            model(*inputs)
            torch.cuda.synchronize()
        out["after trace"] = state(model)
        compiled = torch.compile(model)
        compiled(*inputs)
        torch.cuda.synchronize()
        out["after compile"] = state(model)
        out["compiled"] = state(compiled)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--child")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.calls)))
        return
    rows = []
    for path in args.tasks:
        for i in range(args.processes):
            r = subprocess.run([sys.executable, __file__, "--child", path, "--calls", str(args.calls)],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                print(f"{path} process {i}: exit {r.returncode}: {r.stderr[-500:]}", flush=True)
                continue
            row = json.loads(r.stdout.strip().splitlines()[-1])
            rows.append({"task": path, "process": i, "states": row})
            print(f"{path.rsplit('/', 1)[-1][:24]} p{i}: " + "  ".join(
                f"{k} {v['gpu_ms']:.3f}/{v['wall_ms']:.3f}/{v['launch_ms']:.3f}" for k, v in row.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"columns": "state: gpu_ms (events), wall_ms (synchronized host clock), launch_ms (host time "
                                  "of the call alone)", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
