"""cuda-agent's evaluation against a KernelBench-style one, side by side in one run (issue 15).

    python3 benchmarks/kernelbench_side_by_side.py --kernelbench third_party/KernelBench/KernelBench \
        --tasks 1/19,1/47,1/3,1/40,2/1,3/1 --out side_by_side.json

Per task, each in a fresh process so that its peak host RSS is its own:

* **in-process** (the way KernelBench evaluates): one Python process builds the Model on the GPU and, for
  5 trials, draws ``get_inputs()`` on the CPU, moves it to the GPU and runs the reference and the
  "candidate" (a second instance of the same Model with the same weights), then times the candidate with
  CUDA events: 3 warm-up and 100 timed calls;
* **cuda-agent**: ``eval --calibrate`` (the task's own Model as the candidate), once to fill the build and
  baseline caches, then once more: the figure is that second, cached-baseline evaluation.

Reported: wall time of each, their ratio, peak host RSS of each (the evaluation's processes together for
cuda-agent, from its verdict), and cuda-agent's verdict and speedup_vs_eager. Goals (issue 15): ratio <= 1.0
on every task and <= 0.5 on tasks with >= 1 GiB of inputs; peak host RSS <= 2 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IN_PROCESS = r'''
import importlib.util, json, resource, sys, time
import torch

t_start = time.perf_counter()
spec = importlib.util.spec_from_file_location("task", sys.argv[1])
task = importlib.util.module_from_spec(spec)
spec.loader.exec_module(task)
torch.manual_seed(0)
init = task.get_init_inputs()
ref = task.Model(*init).cuda()
cand = task.Model(*init).cuda()
cand.load_state_dict(ref.state_dict())
ok, in_bytes = True, 0
with torch.no_grad():
    for trial in range(5):
        torch.manual_seed(trial)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
        in_bytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
        a, b = ref(*inputs), cand(*inputs)
        ok = ok and bool(torch.allclose(a, b, atol=1e-2, rtol=1e-2))
        del a, b
    for _ in range(3):
        cand(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(100):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        cand(*inputs)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
times.sort()
print(json.dumps({"wall_s": time.perf_counter() - t_start, "ok": ok, "median_ms": times[50],
                  "input_gib": in_bytes / 2**30,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def in_process(task: Path) -> dict:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", IN_PROCESS, str(task)], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": p.stderr[-1500:], "wall_s": round(wall, 2)}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["wall_s"] = round(wall, 2)  # the process's whole life, interpreter and torch import included
    return r


def cuda_agent(task: Path, cache: Path) -> dict:
    env = dict(os.environ, CUDA_AGENT_CACHE=str(cache))
    cmd = [sys.executable, "-m", "cuda_agent.cli", "eval", str(task), "--calibrate", "--json"]
    subprocess.run(cmd, env=env, capture_output=True, text=True)  # fills the build and baseline caches
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    try:
        v = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": (p.stdout + p.stderr)[-1500:], "wall_s": round(wall, 2)}
    t = v.get("timing", {})
    return {"wall_s": round(wall, 2), "verdict": v.get("verdict"), "speedup_vs_eager": v.get("speedup_vs_eager"),
            "eval_s": v.get("eval_s"), "gpu_phase_s": (t.get("phases_s") or {}).get("gpu_phase"),
            "peak_rss_mb": t.get("peak_host_rss_mb"), "peak_pss_mb": t.get("peak_host_pss_mb"),
            "peak_gpu_mb": t.get("peak_gpu_mb"),
            "footprint": t.get("footprint"), "memory": t.get("memory"), "phases_s": t.get("phases_s"),
            "workers": t.get("workers"),
            "reasons": v.get("reasons", [])[:2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, required=True, help="KernelBench's KernelBench/ folder")
    ap.add_argument("--tasks", default="1/19,1/47,1/3,1/40,2/1,3/1", help="level/problem-id pairs")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--no-in-process", action="store_true",
                    help="cuda-agent's figures only (no ratio): to check a change to cuda-agent against an earlier run")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.mkdtemp(prefix="ca_sbs_")))
    args = ap.parse_args()
    rows = []
    for spec in args.tasks.split(","):
        level, pid = spec.split("/")
        task = next((args.kernelbench / f"level{level}").glob(f"{pid}_*.py"))
        row = {"task": f"L{level}_{task.stem}", "in_process": {} if args.no_in_process else in_process(task),
               "cuda_agent": cuda_agent(task, args.cache)}
        a, b = row["in_process"].get("wall_s"), row["cuda_agent"].get("wall_s")
        row["ratio"] = round(b / a, 3) if a and b and "error" not in row["in_process"] else None
        rows.append(row)
        print(json.dumps({"task": row["task"], "ratio": row["ratio"], "in_process_s": a, "cuda_agent_s": b,
                          "in_process_rss_mb": row["in_process"].get("peak_rss_mb"),
                          "cuda_agent_rss_mb": row["cuda_agent"].get("peak_rss_mb"),
                          "cuda_agent_pss_mb": row["cuda_agent"].get("peak_pss_mb"),
                          "verdict": row["cuda_agent"].get("verdict")}), flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
