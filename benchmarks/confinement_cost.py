"""What confinement (sandbox/confine.py) costs a cached evaluation: `cuda-agent eval --calibrate` on real
KernelBench tasks with confinement on (the default) and off (--unsafe-no-isolation), side by side in one
run, interleaved (on, off, on, off, ...) so that drift on the machine hits both alike. Each mode first
fills its own build and baseline caches (the build key includes the isolation mode); the figures are the
medians of the cached evaluations' wall time (the `eval` process's whole life) and of the verdict's
``eval_s``. The issue's bar: on the H200, confinement adds at most 5% to a cached evaluation.

    python3 benchmarks/confinement_cost.py --kernelbench third_party/KernelBench/KernelBench --reps 3 \
        --out benchmarks/results/DATE_sandbox_confinement_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = {"confined": [], "unconfined": ["--unsafe-no-isolation"]}


def one(task: Path, cache: Path, flags: list[str]) -> dict:
    env = dict(os.environ, CUDA_AGENT_CACHE=str(cache))
    cmd = [sys.executable, "-m", "cuda_agent.cli", "eval", str(task), "--calibrate", "--json", *flags]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    try:
        v = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": (p.stdout + p.stderr)[-1500:], "wall_s": wall}
    return {"wall_s": wall, "eval_s": v.get("eval_s"), "verdict": v.get("verdict"),
            # the candidate (the task's own Model) against the cached eager baseline: does confinement slow the
            # timed calls themselves? (level 3's launch-bound models came out at 0.56-0.83 in the calibration)
            "ms": v.get("ms"), "eager_ms": v.get("eager_ms"), "speedup_vs_eager": v.get("speedup_vs_eager"),
            "phases_s": (v.get("timing") or {}).get("phases_s"),
            "confinement": v.get("confinement", {}).get("mechanism"),
            "landlock": (v.get("confinement", {}).get("landlock") or {}).get("signals"),
            "process_guard": (v.get("confinement", {}).get("process_guard") or {}).get("enforced")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, required=True, help="KernelBench's KernelBench/ folder")
    ap.add_argument("--tasks", default="1/19,1/40,2/1,3/1", help="level/problem-id pairs")
    ap.add_argument("--reps", type=int, default=3, help="cached evaluations per mode and task")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.mkdtemp(prefix="ca_confine_")))
    args = ap.parse_args()
    rows = []
    for spec in args.tasks.split(","):
        level, pid = spec.split("/")
        task = next((args.kernelbench / f"level{level}").glob(f"{pid}_*.py"))
        runs: dict[str, list[dict]] = {m: [] for m in MODES}
        for mode, flags in MODES.items():  # fill each mode's caches
            one(task, args.cache, flags)
        for rep in range(args.reps):  # ABBA: each mode goes first in every other rep, so drift hits both alike
            for mode, flags in list(MODES.items())[:: 1 if rep % 2 == 0 else -1]:
                runs[mode].append(one(task, args.cache, flags))
        row = {"task": f"L{level}_{task.stem}", "runs": runs}
        for mode in MODES:
            ok = [r for r in runs[mode] if "error" not in r]
            row[f"{mode}_wall_s"] = round(statistics.median(r["wall_s"] for r in ok), 3) if ok else None
            row[f"{mode}_eval_s"] = round(statistics.median(r["eval_s"] for r in ok), 3) if ok else None
            row[f"{mode}_speedups"] = [r.get("speedup_vs_eager") for r in ok]
            # where the time goes (the verdict's own phases): confinement acts on the workers' start and on
            # system calls, so a real cost shows in the setup phases, while the GPU phase carries the noise
            phases = [r["phases_s"] for r in ok if r.get("phases_s")]
            row[f"{mode}_phases_s"] = {k: round(statistics.median(p[k] for p in phases if k in p), 3)
                                       for k in phases[0]} if phases else None
        a, b = row["confined_wall_s"], row["unconfined_wall_s"]
        row["wall_ratio"] = round(a / b, 4) if a and b else None
        a, b = row["confined_eval_s"], row["unconfined_eval_s"]
        row["eval_ratio"] = round(a / b, 4) if a and b else None
        pa, pb = row["confined_phases_s"], row["unconfined_phases_s"]
        if pa and pb:
            row["phase_delta_s"] = {k: round(pa[k] - pb[k], 3) for k in pa if k in pb}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
