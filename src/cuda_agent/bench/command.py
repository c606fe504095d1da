"""``cuda-agent bench``: evaluate a policy or existing solutions over KernelBench.

    cuda-agent bench --kernelbench KB --levels 1,2,3 [--problems 1,2,5-9] --solutions DIR --out RUN_DIR
    cuda-agent bench --kernelbench KB --levels 1 --agent --out RUN_DIR -- --model M --base-url URL
    cuda-agent bench --kernelbench KB --levels 1 --calibrate --out RUN_DIR     (each task's Model vs itself)
    cuda-agent bench --export-baselines FILE | --import-baselines FILE

Exit codes: 0 when every selected attempt has a row; 2 bad input (the message names it);
3 some attempts need a GPU and this host has none (they get no row: run again on a GPU host);
130 interrupted (committed rows are kept; the same command resumes).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXIT_BAD_INPUT, EXIT_NO_GPU, EXIT_INTERRUPTED = 2, 3, 130


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = __doc__.split("\n\n", 2)[1]
    g = p.add_argument_group("what to run")
    g.add_argument("--kernelbench", type=Path, help="KernelBench checkout (ROOT/[KernelBench/]levelN/*.py)")
    g.add_argument("--levels", default="1,2,3", help="levels, e.g. 1,2,3 (default)")
    g.add_argument("--problems", default=None, help="problem ids in every level, e.g. 1,2,5-9 (default all)")
    g.add_argument("--out", type=Path, help="run directory; an existing one is resumed")
    g.add_argument("--redo", default="", metavar="TASKS",
                   help="resuming: evaluate these tasks again, dropping what was recorded (e.g. L1_14,L2_66)")
    g.add_argument("--solutions", type=Path, default=None,
                   help="evaluate the solutions here: KernelBench generations "
                        "(level_L_problem_P_sample_S_kernel.py), a bench run directory, or workspaces named by "
                        "task id (L1_19/ or L1_19.py)")
    g.add_argument("--agent", action="store_true", help="solve each task with the agent (cuda_agent.agent); "
                                                        "words after -- go to the agent untouched")
    g.add_argument("--agent-solver", default=None, metavar="MODULE:FUNCTION",
                   help="--agent with another solver: FUNCTION(task, workdir, argv) -> episode")
    g.add_argument("--calibrate", action="store_true",
                   help="evaluate every task's own Model as the candidate (as eval --calibrate): speed-ups "
                        "should be 1.00x; the report shows each task's figures, eval time and GPU-phase share")
    g.add_argument("--samples", type=int, default=1, help="--agent: episodes per task (default 1)")
    g.add_argument("--agent-jobs", type=int, default=4, help="--agent: episodes at once (default 4)")
    g = p.add_argument_group("where it runs")
    g.add_argument("--gpus", default="all", help="'all' (default) or indexes 0,1: one evaluation lane per GPU")
    g.add_argument("--per-gpu", type=int, default=1, help="evaluation lanes per GPU (default 1: serialized)")
    g.add_argument("--shared-cpus", action="store_true",
                   help="let every GPU lane use every CPU (default with 2+ lanes: each lane gets its own share "
                        "of the physical cores, so another lane's compile cannot slow a launch-bound timing)")
    g.add_argument("--build-jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2),
                   help="builds ahead of the GPU lanes (default: half the CPUs)")
    g.add_argument("--task-timeout", type=float, default=3600.0,
                   help="seconds one evaluation may take before its lane is killed (default 3600)")
    g.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="distribute evaluations over a Ray cluster (num_gpus=1 each) instead of local lanes")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("how it is judged")
    g.add_argument("--precision", choices=("fp32", "tf32"), default="fp32",
                   help="fp32 (default): strict FP32 baselines; tf32: baselines may use TF32")
    from ..sandbox.commands.check_cmd import add_isolation_argument, add_rules_argument

    add_rules_argument(g)
    add_isolation_argument(g)
    g.add_argument("--trials", type=int, default=5, help="correctness trials before timing (default 5)")
    g.add_argument("--no-baseline-cache", action="store_true", help="re-time eager and compile for every attempt")
    g.add_argument("--seed", type=int, default=None, help="seed of the trial inputs (default: fresh per attempt)")
    g = p.add_argument_group("baseline timings")
    g.add_argument("--import-baselines", type=Path, default=None, metavar="FILE",
                   help="add eager/compile timings from FILE to this host's cache (before a run)")
    g.add_argument("--export-baselines", type=Path, default=None, metavar="FILE",
                   help="write this host's cached timings to FILE (after a run)")
    g.add_argument("--baseline-gpu", default=None, metavar="NAME",
                   help="export only this GPU model (default: this host's GPU, or all when it has none)")
    p.add_argument("agent_argv", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def passthrough(args: argparse.Namespace) -> list[str]:
    """The words after ``--``: the agent's own options, untouched."""
    words = list(args.agent_argv or [])
    return words[1:] if words[:1] == ["--"] else words


def _fail(message: str) -> int:
    print(f"cuda-agent bench: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    from .sources import BenchError

    try:
        return _run(args)
    except (BenchError, ValueError) as e:  # ValueError: an invalid SandboxConfig value
        return _fail(str(e))


def _run(args: argparse.Namespace) -> int:
    from ..sandbox import SandboxConfig
    from ..sandbox.commands.check_cmd import isolation
    from . import baselines
    from .policy import DEFAULT_SOLVER
    from .sources import BenchError, parse_ids

    cache_dir = SandboxConfig().cache_dir
    if args.import_baselines:
        counts = baselines.import_baselines(cache_dir, args.import_baselines)
        print(f"imported baselines: {baselines.describe(counts)} into {cache_dir / 'baselines.sqlite'}")
    if args.kernelbench is None:
        if args.export_baselines:
            return _export(args, cache_dir)
        if args.import_baselines:
            return 0
        raise BenchError("--kernelbench DIR is required (or only --import-baselines / --export-baselines)")
    if args.out is None:
        raise BenchError("--out RUN_DIR is required")
    agent_argv = passthrough(args)
    agent = args.agent_solver or (DEFAULT_SOLVER if args.agent else None)
    if sum(map(bool, (agent, args.solutions, args.calibrate))) != 1:
        raise BenchError("give exactly one of --solutions DIR, --agent and --calibrate")
    if agent_argv and not agent:
        raise BenchError(f"unexpected arguments {' '.join(agent_argv)} (words after -- go to --agent only)")
    for name in ("samples", "agent_jobs", "per_gpu", "build_jobs"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be >= 1")
    levels = parse_ids(args.levels, "--levels")
    if not levels:
        raise BenchError("--levels: give at least one level")
    from .runner import Bench, BenchConfig

    config = BenchConfig(
        kernelbench=args.kernelbench, out=args.out, levels=levels, problems=parse_ids(args.problems),
        solutions=args.solutions, agent=agent, agent_argv=agent_argv, samples=args.samples, gpus=args.gpus,
        per_gpu=args.per_gpu, build_jobs=args.build_jobs, agent_jobs=args.agent_jobs,
        task_timeout_s=args.task_timeout, ray_address=args.ray, progress=not args.no_progress,
        sandbox=SandboxConfig(precision=args.precision, rules=args.rules, num_trials=args.trials,
                              use_baseline_cache=not args.no_baseline_cache, seed=args.seed, spare_workers=2,
                              calibrate=args.calibrate, isolation=isolation(args)),
        argv=sys.argv[1:], calibrate=args.calibrate, split_cpus=not args.shared_cpus,
        redo=tuple(t.strip() for t in args.redo.split(",") if t.strip()))
    from ..sandbox.confine import unavailable
    unconfinable = unavailable(config.sandbox.isolation)
    if unconfinable:  # fail closed, before any candidate code is built or run
        raise BenchError(unconfinable)
    outcome = Bench(config).run()
    _print_summary(config, outcome)
    if args.export_baselines:
        _export(args, cache_dir)
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_NO_GPU if outcome.no_gpu else 0


def _print_summary(config, outcome) -> None:
    from .report import calibration_summary, load, table1_markdown

    for notice in outcome.notices:
        print(f"notice: {notice}", file=sys.stderr)
    run = load(config.out)
    print(table1_markdown([run]))
    harness = run.summaries[-1].harness_errors
    if harness:  # a task that cannot fit or whose reference does not repeat itself is not evaluated again
        again = sum(1 for r in run.results if r.verdict.get("verdict") == "harness_error"
                    and "harness_retried" in (r.verdict.get("flags") or []))
        print(f"\n{harness} attempt(s) ended in harness_error (not the candidate's failure; {again} of them evaluated "
              "twice): see the report's Harness errors section")
    if run.calibration:
        print(f"\ncalibration: {calibration_summary(run)}")
    print(f"\n{config.out}: {outcome.total} attempts selected, {outcome.done_before} recorded before, "
          f"{outcome.recorded} recorded now; results.sqlite, results.jsonl, tasks/")
    if outcome.no_gpu:
        print(f"no GPU on this host: {len(outcome.no_gpu)} attempt(s) passed the static checks and built, and need a "
              "GPU for correctness and timing; they are not recorded. Run the same command on a GPU host to finish "
              "the run.", file=sys.stderr)
    print(f"report: cuda-agent report {config.out}")


def _export(args: argparse.Namespace, cache_dir: Path) -> int:
    from ..sandbox.gpu import list_gpus
    from . import baselines

    gpu = args.baseline_gpu
    if gpu is None and list_gpus():
        gpu = list_gpus()[0].name
    counts = baselines.export_baselines(cache_dir, args.export_baselines, gpu)
    print(f"exported baselines ({'GPU ' + gpu if gpu else 'all GPUs'}): {baselines.describe(counts)} "
          f"to {args.export_baselines}")
    return 0
