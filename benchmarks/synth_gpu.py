"""GPU pass of `cuda-agent synth` (issue 6) on a sample of generated tasks.

    python3 benchmarks/synth_gpu.py --count 200 --work /tmp/synth_gpu --time-budget 540

Generates ``--count`` tasks on the CPU (or takes ``--in FILE``), then runs the GPU
filter on them: shape scaling into the eager-runtime window (CUDA events, median after
warm-up, L2 flushed), and the full inductor ``torch.compile`` check. Reports the share
of tasks landing in the window, the inductor pass share and the seconds per task.

Needs only torch (+ triton for inductor); pyarrow/tqdm are used when present. The work
directory makes it resumable: with ``--time-budget`` it stops cleanly before the budget
and a rerun of the same command continues where it stopped (the device allows 10
minutes per command). Figures are printed and written to ``<work>/figures.json`` (and to
``$OUT/synth_gpu.json`` when ``$OUT`` is set).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import cuda_agent  # noqa: F401
except ImportError:  # the device gets a copy of the tree, not an installed package
    sys.path.insert(0, str(ROOT / "src"))


def generate(args, tasks: Path) -> None:
    from cuda_agent.synth import SynthConfig, synthesize

    if tasks.exists():
        return
    workers = max(1, min(8, (os.cpu_count() or 2) - 2))
    cfg = SynthConfig(count=args.count, seed=args.seed, out=tasks, workers=workers,
                      kernelbench=args.kernelbench, progress=False)
    t0 = time.perf_counter()
    s = synthesize(cfg)
    print(f"generated {s.accepted} tasks on the CPU in {time.perf_counter() - t0:.0f} s "
          f"({workers} workers)", flush=True)


def figures(log: Path, total: int) -> dict:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    timed = [r for r in rows if r.get("gpu_seconds") is not None]
    runtime = Counter((r["filters"].get("runtime") or "?").split(" (")[0].split(":")[0] for r in rows)
    reasons = Counter(r["filters"]["runtime"].split(" after ")[0].split(" ms ")[-1][:60]
                      for r in rows if str(r["filters"].get("runtime", "")).startswith("fail"))
    comp = Counter(str(r["filters"].get("compile", "?")).split(":")[0] for r in rows)
    comp_reasons = Counter(str(r["filters"].get("compile"))[:90] for r in rows
                           if str(r["filters"].get("compile", "")).startswith("fail"))
    eager = [r["eager_ms"] for r in rows if r.get("eager_ms") is not None and r["filters"].get("runtime") == "pass"]
    speed = [r["eager_ms"] / r["compile_ms"] for r in rows
             if r.get("compile_ms") and r.get("eager_ms") and r["filters"].get("compile") == "pass"]
    secs = [r["gpu_seconds"] for r in timed]
    import torch

    return {
        "tasks_checked": len(rows),
        "tasks_in_sample": total,
        "runtime_in_window": runtime.get("pass", 0),
        "runtime_in_window_share": round(runtime.get("pass", 0) / max(len(rows), 1), 3),
        "runtime_fail_reasons": dict(reasons.most_common(8)),
        "inductor_pass": comp.get("pass", 0),
        "inductor_fail_reasons": dict(comp_reasons.most_common(8)),
        "accepted": sum(r["status"] == "accepted" for r in rows),
        "seconds_per_task_mean": round(statistics.mean(secs), 2) if secs else None,
        "seconds_per_task_median": round(statistics.median(secs), 2) if secs else None,
        "eager_ms_median_in_window": round(statistics.median(eager), 3) if eager else None,
        "eager_over_inductor_median": round(statistics.median(speed), 3) if speed else None,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200, help="tasks to generate (>= 200 for the report)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--in", dest="inp", type=Path, default=None, help="use this task file instead")
    ap.add_argument("--work", type=Path, default=Path("/tmp/synth_gpu"), help="work directory (resumable)")
    ap.add_argument("--kernelbench", type=Path, default=None)
    ap.add_argument("--window-ms", default="1,100")
    ap.add_argument("--no-compile", action="store_true", help="skip the inductor check")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="stop the GPU pass after this many seconds (rerun to continue)")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("synth_gpu: torch sees no CUDA device", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tasks = args.inp or args.work / "tasks.jsonl"
    if args.inp is None:
        generate(args, tasks)
    from cuda_agent.synth.gpu import filter_file
    from cuda_agent.synth.writer import read_rows

    total = sum(1 for _ in read_rows(tasks))
    lo, hi = (float(v) for v in args.window_ms.split(","))
    budget = None if args.time_budget is None else max(10.0, args.time_budget - (time.perf_counter() - t0))
    out = args.work / "gpu.jsonl"
    print(filter_file(tasks, out, window_ms=(lo, hi), compile=not args.no_compile,
                      progress=sys.stderr.isatty(), time_budget_s=budget), flush=True)
    figs = figures(out.with_name(out.name + ".parts") / "attempts.jsonl", total)
    figs["wall_s_this_run"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(figs, indent=1)
    print(text)
    (args.work / "figures.json").write_text(text + "\n")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "synth_gpu.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
