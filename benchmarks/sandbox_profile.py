"""Where an evaluation of a large task spends its time (issue 15: confirm the cause before the redesign).

    python3 benchmarks/sandbox_profile.py --kernelbench third_party/KernelBench/KernelBench \
        --tasks 1/40,1/47 --out profile_dir

Evaluates each task's own Model as the candidate (``eval --calibrate``), with the evaluator under cProfile
and every worker profiling itself (``worker.PROFILE_ENV``), and reports per task: the phases
(``timing.phases_s``), the input and output sizes, and the functions that took the most time in the
evaluator and in each worker (cumulative seconds).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import tempfile
import time
from pathlib import Path


def top(stats: pstats.Stats, n: int = 14) -> list[tuple[str, float]]:
    rows = []
    for (file, line, fn), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        rows.append((f"{Path(file).name}:{line}({fn})", round(ct, 2)))
    rows.sort(key=lambda r: -r[1])
    keep = [r for r in rows if not any(s in r[0] for s in ("<built-in method builtins.exec>", "(<module>)"))]
    return keep[:n]


def profile_task(task_path: Path, cache: Path) -> dict:
    import torch

    from cuda_agent.sandbox import SandboxConfig, evaluate
    from cuda_agent.sandbox import inputs as trial_inputs
    from cuda_agent.sandbox.worker import PROFILE_ENV
    from cuda_agent.tasks import load_task, validate_task

    task = load_task(task_path)
    module = validate_task(task)
    t0 = time.perf_counter()
    draw = trial_inputs.draw(module, 1)
    draw_s = time.perf_counter() - t0
    buf = io.BytesIO()
    t0 = time.perf_counter()
    torch.save(draw, buf)
    save_s = time.perf_counter() - t0
    in_bytes = trial_inputs.nbytes(draw)
    del draw, buf
    wdir = Path(tempfile.mkdtemp(prefix="wprof_"))
    os.environ[PROFILE_ENV] = str(wdir)
    prof = cProfile.Profile()
    prof.enable()
    v = evaluate(task, None, SandboxConfig(calibrate=True, cache_dir=cache))
    prof.disable()
    os.environ.pop(PROFILE_ENV)
    workers = {}
    for f in sorted(wdir.glob("*.prof")):
        workers[f.stem] = top(pstats.Stats(str(f)))
    return {"task": task.name, "verdict": v.verdict, "reasons": v.reasons[:3], "eval_s": v.eval_s,
            "phases_s": v.timing.get("phases_s"), "input_mib": round(in_bytes / 2**20, 1),
            "cpu_draw_s": round(draw_s, 2), "torch_save_s": round(save_s, 2),
            "speedup_vs_eager": v.speedup_vs_eager, "memory": v.timing.get("memory"),
            "footprint": v.timing.get("footprint"), "peak_host_rss_mb": v.timing.get("peak_host_rss_mb"),
            "peak_gpu_mb": v.timing.get("peak_gpu_mb"), "evaluator_top": top(pstats.Stats(prof)), "workers": workers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", type=Path, required=True, help="KernelBench's KernelBench/ folder")
    ap.add_argument("--tasks", default="1/40", help="level/problem-id pairs, comma-separated")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.mkdtemp(prefix="ca_prof_")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in args.tasks.split(","):
        level, pid = spec.split("/")
        path = next((args.kernelbench / f"level{level}").glob(f"{pid}_*.py"))
        r = profile_task(path, args.cache)
        results.append(r)
        print(json.dumps({k: r[k] for k in ("task", "verdict", "eval_s", "phases_s", "input_mib", "cpu_draw_s",
                                             "torch_save_s", "peak_host_rss_mb", "peak_gpu_mb")}), flush=True)
        (args.out / "sandbox_profile.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
