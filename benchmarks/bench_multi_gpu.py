"""A bench spread over the GPUs of one host (issue 8): one GPU against all of them, in one call.

    python benchmarks/make_bench_problems.py --out /tmp/bench_problems --copies 2     # 52 problems
    python benchmarks/bench_multi_gpu.py --problems /tmp/bench_problems --out /tmp/mgpu \\
        [--phases fill,one,all] [--per-gpu 4]

Phases (each a `cuda-agent bench --solutions` run in its own run directory, one cache for all):
  * fill: ``--gpus all`` into an empty cache: builds and the eager/compile baselines of every task
    (not compared: it is there so that the next two differ only in the GPUs they use);
  * one: ``--gpus 0``, builds and baselines cached;
  * all: ``--gpus all``, the same.
``--phases fill`` and ``--phases one,all`` may run in separate calls (same ``--out``): the figures
below need one and all in the same call.

Figures (OUT/multi_gpu.json):
  * throughput: attempts per minute of "one" and "all"; scaling = all / one (ideal: the GPU count);
  * agreement: per (task, sample) correct in both, the candidate's ms on all GPUs / on one GPU:
    the share within 3%, the median and the worst;
  * overlap: within each run, the timed windows of the verdicts (``timing.timed_windows``, epoch
    seconds, one per timing request) on the same GPU (``timing.gpu_uuid``) must never overlap:
    timing on a GPU is exclusive whatever lane or process asks for it.
Exit 0 when the run used 2+ GPUs, scaled by >= 0.75 x the GPU count, and no windows overlapped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_throughput import run_bench  # noqa: E402 - the same bench run and row reading

SCALING_SHARE = 0.75
AGREE = 0.03


def bench(problems: Path, solutions: Path, run_dir: Path, gpus: str, per_gpu: int, env: dict) -> dict:
    wall, rows = run_bench(problems, solutions, run_dir, gpus, per_gpu, env)
    verdicts = [v for *_, v in rows]
    return {"gpus_arg": gpus, "per_gpu": per_gpu, "wall_s": round(wall, 1), "attempts": len(rows),
            "attempts_per_min": round(60 * len(rows) / wall, 2),
            "correct": sum(v.get("verdict") == "correct" for v in verdicts),
            "baseline_cached": sum(bool(v.get("baseline_cached")) for v in verdicts if v.get("verdict") == "correct"),
            "gpus_used": sorted({(v.get("timing") or {}).get("gpu_uuid") for v in verdicts} - {None}),
            "lanes": sorted({lane for *_, lane, _ in rows if lane}),
            "overlaps": overlaps(rows),
            "ms": {f"{task}/{sample}": v["ms"] for task, sample, _, v in rows
                   if v.get("verdict") == "correct" and v.get("ms")}}


def overlaps(rows: list) -> list[dict]:
    """Pairs of timed windows of different evaluations on one GPU that overlap (1 ms of slack for
    the rounding of the recorded times)."""
    by_gpu: dict[str, list] = {}
    for task, sample, _lane, v in rows:
        timing = v.get("timing") or {}
        for start, end in timing.get("timed_windows") or []:
            by_gpu.setdefault(timing.get("gpu_uuid"), []).append((start, end, f"{task}/{sample}"))
    found = []
    for gpu, windows in by_gpu.items():
        windows.sort()
        latest = None  # the window that ends last so far
        for w in windows:
            if latest is not None and w[0] < latest[1] - 1e-3 and w[2] != latest[2]:
                found.append({"gpu": gpu, "a": latest[2], "b": w[2], "overlap_s": round(latest[1] - w[0], 4)})
            if latest is None or w[1] > latest[1]:
                latest = w
    return found


def agreement(one: dict, many: dict) -> dict:
    common = sorted(set(one) & set(many))
    ratios = {k: many[k] / one[k] for k in common}
    if not ratios:
        return {"tasks": 0}
    dev = sorted(abs(r - 1) for r in ratios.values())
    worst = max(ratios, key=lambda k: abs(ratios[k] - 1))
    return {"tasks": len(ratios), "within_3pct": sum(d <= AGREE for d in dev),
            "median_ratio": round(statistics.median(ratios.values()), 4),
            "median_abs_dev": round(statistics.median(dev), 4),
            "worst": {"task": worst, "ratio": round(ratios[worst], 4)},
            "ratios": {k: round(r, 4) for k, r in ratios.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", type=Path, required=True, help="output of benchmarks/make_bench_problems.py")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--phases", default="fill,one,all")
    p.add_argument("--per-gpu", type=int, default=4)
    args = p.parse_args(argv)
    phases = [x for x in args.phases.split(",") if x]
    if set(phases) - {"fill", "one", "all"}:
        p.error("--phases takes fill, one and all")
    args.out.mkdir(parents=True, exist_ok=True)
    cache = args.out / "cache"
    env = dict(os.environ, CUDA_AGENT_CACHE=str(cache), PYTHONWARNINGS="ignore")
    result_path = args.out / "multi_gpu.json"
    res = json.loads(result_path.read_text()) if result_path.exists() and "fill" not in phases else {}
    res.update(host=os.uname().nodename, cpus=os.cpu_count())
    if "fill" in phases:
        shutil.rmtree(cache, ignore_errors=True)
    gpus = {"fill": "all", "one": "0", "all": "all"}
    for phase in phases:
        r = bench(args.problems, args.problems / "solutions", args.out / f"run_{phase}", gpus[phase], args.per_gpu, env)
        res[phase] = r
        print(f"{phase:5s} --gpus {r['gpus_arg']:4s}: {r['attempts']} attempts in {r['wall_s']} s = "
              f"{r['attempts_per_min']}/min on {len(r['gpus_used'])} GPU(s), {r['correct']} correct "
              f"({r['baseline_cached']} with cached baselines), {len(r['overlaps'])} overlapping timings", flush=True)
        result_path.write_text(json.dumps(res, indent=1))
    if "one" not in phases or "all" not in phases:
        return 0
    one, many = res["one"], res["all"]
    n = len(many["gpus_used"])
    scaling = many["attempts_per_min"] / one["attempts_per_min"] if one["attempts_per_min"] else 0.0
    # comparable only if neither run paid for baselines (a cut-short fill would favour "all")
    comparable = all(r["baseline_cached"] == r["correct"] for r in (one, many))
    agree = agreement(one["ms"], many["ms"])
    res["summary"] = {"gpus": n, "scaling": round(scaling, 2), "ideal": n, "agreement": agree,
                      "overlaps": len(one["overlaps"]) + len(many["overlaps"]), "comparable": comparable,
                      "met": n >= 2 and comparable and scaling >= SCALING_SHARE * n
                             and not one["overlaps"] and not many["overlaps"]}
    result_path.write_text(json.dumps(res, indent=1))
    print(f"\nscaling: {scaling:.2f}x on {n} GPUs (target >= {SCALING_SHARE * n:.2f}x)")
    if agree.get("tasks"):
        print(f"per-task ms, all GPUs / one GPU: {agree['within_3pct']}/{agree['tasks']} within 3%, median "
              f"{agree['median_ratio']}, median |dev| {agree['median_abs_dev']}, worst {agree['worst']}")
    print(f"overlapping timings on one GPU: {res['summary']['overlaps']}")
    if not comparable:
        print("NOT comparable: a run computed baselines (run the fill phase to the end first)")
    print(f"written: {result_path}")
    return 0 if res["summary"]["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
