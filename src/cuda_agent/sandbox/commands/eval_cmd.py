"""``cuda-agent eval TASK [SOLUTION] [--json]``: one verdict. Exit 0 whenever an evaluation
happened (whatever the verdict), 2 on bad input, 3 when this host has no CUDA GPU."""

from __future__ import annotations

import argparse
import json
import sys

EXIT_NO_GPU = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", help="KernelBench-format task file (class Model, get_inputs, get_init_inputs)")
    p.add_argument("solution", nargs="?", help="workspace directory or single .py file defining ModelNew")
    p.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    p.add_argument("--precision", choices=("fp32", "tf32"), default="fp32",
                   help="fp32 (default): strict FP32 baselines, TF32-level errors rejected; "
                        "tf32: baselines may use TF32 too")
    from .check_cmd import add_isolation_argument, add_rules_argument

    add_rules_argument(p)
    add_isolation_argument(p)
    p.add_argument("--calibrate", action="store_true",
                   help="evaluate the task's own Model as the candidate (speedup_vs_eager should be 1.00)")
    p.add_argument("--trials", type=int, default=5, help="correctness trials before timing (>= 1)")
    p.add_argument("--no-strict", action="store_true",
                   help="turn the dynamic guards off (to measure their cost); static rules still apply")
    p.add_argument("--no-baseline-cache", action="store_true", help="re-time eager and compile")
    p.add_argument("--seed", type=int, default=None, help="seed of the trial inputs (default: fresh)")
    p.add_argument("--device", type=int, default=0, help="GPU index")


def run(args: argparse.Namespace) -> int:
    from ..config import SandboxConfig
    from ..process import prestart
    from ..solution import SolutionError, load_solution
    from .check_cmd import isolation

    if args.solution is None and not args.calibrate:
        print("cuda-agent eval: give a SOLUTION, or --calibrate to evaluate the task's own Model", file=sys.stderr)
        return 2
    try:
        solution = load_solution(args.solution) if args.solution else None
        config = SandboxConfig(precision=args.precision, rules=args.rules, calibrate=args.calibrate, num_trials=args.trials,
                               strict=not args.no_strict, use_baseline_cache=not args.no_baseline_cache,
                               seed=args.seed, device=args.device, isolation=isolation(args))
    except (SolutionError, ValueError) as e:
        print(f"cuda-agent eval: {e}", file=sys.stderr)
        return 2
    # the workers start now, before this process imports torch and checks the task: their start-up is paid meanwhile
    prestart(config, solution.kind if solution is not None else None)
    from ...tasks import TaskError, load_task
    from .. import NoGpuError, evaluate

    try:
        task = load_task(args.task)
    except TaskError as e:
        print(f"cuda-agent eval: {e}", file=sys.stderr)
        return 2
    try:
        verdict = evaluate(task, solution, config)
    except NoGpuError as e:
        print(f"cuda-agent eval: {e}", file=sys.stderr)
        return EXIT_NO_GPU
    except TaskError as e:
        print(f"cuda-agent eval: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(verdict.to_dict(), indent=1))
    else:
        print(summarize(verdict))
    return 0


def _fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def summarize(v) -> str:
    lines = [f"verdict: {v.verdict}   reward: {'null' if v.reward is None else format(v.reward, 'g')}   task: {v.task}"]
    if v.ms is not None:
        lines.append(f"time: {_fmt(v.ms, '.4f')} ms   eager: {_fmt(v.eager_ms, '.4f')} ms   "
                     f"compile: {_fmt(v.compile_ms, '.4f')} ms   speedup vs eager: {_fmt(v.speedup_vs_eager, '.2f')}x   "
                     f"vs compile: {_fmt(v.speedup_vs_compile, '.2f')}x")
    from ..roofline import summary_line

    headroom = summary_line(v.roofline)
    if headroom:
        lines.append(f"headroom: {headroom}")
    from ..timing import host_bound_line

    host = host_bound_line((v.timing or {}).get("host_bound"))
    if host:
        lines.append(host)
    if v.rel_err is not None:
        lines.append(f"error: rel {v.rel_err:.2e} (tolerance {_fmt(v.tolerance, '.0e')})   max abs "
                     f"{_fmt(v.max_abs_err, '.2e')}   allclose(1e-2): {v.allclose_1e2}   trials: {v.num_trials}")
    lines.append(f"precision: {v.precision.get('mode')}   rules: {v.rules}   build: {_fmt(v.build_s, '.2f')} s   "
                 f"eval: {_fmt(v.eval_s, '.2f')} s   baseline cached: {v.baseline_cached}")
    if v.flags:
        lines.append("flags: " + ", ".join(v.flags))
    for r in v.reasons:
        lines.append(f"- {r}")
    if v.log and v.verdict != "correct":
        lines.append("log:\n" + v.log)
    return "\n".join(lines)
