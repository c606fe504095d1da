"""``cuda-agent optimize``: run the agent on a task file or on your own nn.Module.

    cuda-agent optimize TASK.py [--base-url URL --model NAME | --model HF_NAME_OR_DIR | --replay FILE]
    cuda-agent optimize --module pkg.mod:MyBlock --inputs "float32[8,1024];float32[1024]" --init-args "[1024]"

Writes to ``--out`` (default ``runs/optimize/<name>-<time>``)::

    run/                 workspace/, candidates/, best/, episode.json (rewritten every turn)
    trajectory.jsonl     the episode's record (also appended to --trajectories if given)
    solution/            the best verified solution: model_new.py, kernels/, cuda_ext.so, verdict.json
    <module>_optimized.py   (--module) a drop-in module: same class name, constructor and state_dict

Exit 0 when an episode ran (whatever its outcome), 2 on bad input. Heavy imports happen in run().
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2
EXIT_NO_CONFINEMENT = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task", nargs="?", help="KernelBench-format task file (class Model, get_inputs, get_init_inputs)")
    own = p.add_argument_group("your own model (instead of TASK)")
    own.add_argument("--module", help="MODULE:CLASS (pkg.mod:MyBlock or path/file.py:MyBlock)")
    own.add_argument("--inputs", help='example inputs, DTYPE[SHAPE] separated by ";", e.g. "float32[8,1024];float32[1024]"')
    own.add_argument("--init-args", default=None, help="constructor arguments as JSON: a list (positional) or an object")
    llm = p.add_argument_group("model backend (default: --base-url if given, else a local transformers model)")
    llm.add_argument("--backend", choices=("openai", "local", "replay"), default=None)
    llm.add_argument("--base-url", default=os.environ.get("CUDA_AGENT_BASE_URL"),
                     help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (env CUDA_AGENT_BASE_URL)")
    llm.add_argument("--model", default=None, help="served model name (openai) or HF name / local dir (local)")
    llm.add_argument("--api-key-env", default="OPENAI_API_KEY", help="env variable holding the API key")
    llm.add_argument("--text-tools", action="store_true", help="openai: tool calls as text, not native")
    llm.add_argument("--replay", default=None, help="replay a recorded trajectory (.jsonl) or steps file (.json)")
    llm.add_argument("--temperature", type=float, default=None)
    llm.add_argument("--max-new-tokens", type=int, default=None, help="tokens per reply")
    llm.add_argument("--context-tokens", type=int, default=None, help="the model's context window")
    run = p.add_argument_group("episode")
    run.add_argument("--max-turns", type=int, default=200)
    run.add_argument("--max-wall-s", type=float, default=None)
    run.add_argument("--max-tokens", type=int, default=None, help="prompt + completion tokens for the episode")
    run.add_argument("--target-speedup", type=float, default=1.05,
                     help="stop once verified speedup_vs_compile exceeds this (default 1.05)")
    run.add_argument("--no-stop-at-target", action="store_true", help="keep going until submit or the budget ends")
    run.add_argument("--precision", choices=("fp32", "tf32"), default="fp32")
    from ..sandbox.commands.check_cmd import add_isolation_argument, add_rules_argument

    add_rules_argument(run)
    add_isolation_argument(run)
    run.add_argument("--device", type=int, default=0, help="GPU index for verify/profile")
    run.add_argument("--out", type=Path, default=None, help="output directory")
    run.add_argument("--trajectories", type=Path, default=None, help="also append the record to this JSONL")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument("--json", action="store_true", help="print a JSON summary at the end")


def _backend(args):
    from .backends import make_backend

    kind = args.backend or ("replay" if args.replay else "openai" if args.base_url else "local")
    if kind == "replay":
        if not args.replay:
            raise ValueError("--backend replay needs --replay FILE")
        return make_backend("replay", path=args.replay)
    opts = {}
    if args.temperature is not None:
        opts["temperature"] = args.temperature
    if args.context_tokens is not None:
        opts["context_tokens"] = args.context_tokens
    if kind == "openai":
        if not args.base_url:
            raise ValueError("--backend openai needs --base-url")
        if args.max_new_tokens is not None:
            opts["max_tokens"] = args.max_new_tokens
        return make_backend("openai", base_url=args.base_url, model=args.model or "default",
                            api_key_env=args.api_key_env, native_tools=False if args.text_tools else None, **opts)
    if args.max_new_tokens is not None:
        opts["max_new_tokens"] = args.max_new_tokens
    if args.model:
        opts["model"] = args.model
    return make_backend("local", **opts)


def config_from_args(args: argparse.Namespace):
    from ..sandbox import SandboxConfig
    from ..sandbox.commands.check_cmd import isolation
    from .config import AgentConfig

    config = AgentConfig(max_turns=args.max_turns, max_wall_s=args.max_wall_s, max_tokens=args.max_tokens,
                         target_speedup=None if args.no_stop_at_target else args.target_speedup,
                         sandbox=SandboxConfig(precision=args.precision, rules=args.rules, device=args.device,
                                               spare_workers=2, isolation=isolation(args)))
    if args.context_tokens:
        config.context.context_tokens = args.context_tokens
    return config


def solve(task, workdir: str | Path, argv: list[str] | tuple[str, ...] = ()) -> tuple[Path, Path]:
    """The solver ``cuda-agent bench --agent`` calls: one episode on ``task`` in ``workdir``, with the
    backend and episode options of ``cuda-agent optimize`` given as ``argv`` (e.g. ``--base-url URL
    --model NAME --max-turns 150``). Returns (solution directory, trajectory JSONL): the best verified
    solution, or a snapshot of the final sources when none was correct."""
    from .loop import run_episode
    from .progress import ConsoleProgress, Progress

    parser = argparse.ArgumentParser(prog="cuda-agent bench ... -- (agent options)")
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    trajectory = workdir / "trajectory.jsonl"
    record = run_episode(task, _backend(args), config_from_args(args), run_dir=workdir / "run",
                         trajectories=trajectory, progress=Progress() if args.quiet else ConsoleProgress())
    best = Path(record["run_dir"]) / "best"
    if record["best"] and best.is_dir():
        return best, trajectory
    from .workspace import Workspace

    ws = Workspace(Path(record["run_dir"]) / "workspace", {})
    solution, _, _ = ws.snapshot(Path(record["run_dir"]) / "candidates")
    return solution.path, trajectory


def run(args: argparse.Namespace) -> int:
    import shutil
    import time

    from ..sandbox import build, load_solution
    from ..tasks import TaskError, load_task
    from .backends import BackendError
    from .loop import run_episode
    from .own_model import task_from_module, write_dropin
    from .progress import ConsoleProgress, Progress

    try:
        if args.module:
            if args.task:
                raise TaskError("give either TASK or --module, not both")
            if not args.inputs:
                raise TaskError("--module needs --inputs, e.g. --inputs 'float32[8,1024]'")
            task = task_from_module(args.module, args.inputs, args.init_args)
        elif args.task:
            path = Path(args.task)
            task = load_task(path, name=path.parent.name if path.stem == "task" else None)
        else:
            raise TaskError("give a TASK file or --module MODULE:CLASS --inputs SPEC")
        config = config_from_args(args)
        sandbox = config.sandbox
        model = _backend(args)
    except (TaskError, ValueError, BackendError, OSError) as e:
        print(f"cuda-agent optimize: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from ..sandbox.confine import unavailable
    unconfinable = unavailable(sandbox.isolation)
    if unconfinable:  # fail closed: the agent's bash and every verify run model-written code
        print(f"cuda-agent optimize: {unconfinable}", file=sys.stderr)
        return EXIT_NO_CONFINEMENT
    out = args.out or Path("runs") / "optimize" / f"{task.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    progress = Progress() if args.quiet else ConsoleProgress()
    meta = {"source": {"module": args.module, "task": args.task}}
    record = run_episode(task, model, config, run_dir=out / "run", trajectories=out / "trajectory.jsonl",
                         progress=progress, meta=meta)
    if args.trajectories:
        from .trajectory import append_jsonl
        append_jsonl(args.trajectories, record)
    summary = {"ended_by": record["ended_by"], "turns": record["turns"], "reward": record["reward"],
               "best": None, "out": str(out)}
    best_dir = out / "run" / "best"
    if record["best"] and best_dir.is_dir():
        solution = out / "solution"
        shutil.rmtree(solution, ignore_errors=True)
        shutil.copytree(best_dir, solution)
        built = build(load_solution(solution), sandbox)
        if built.ok and built.library:
            shutil.copy2(built.library, solution / "cuda_ext.so")
        summary["best"] = {k: record["best"].get(k) for k in ("speedup_vs_eager", "speedup_vs_compile", "reward")}
        summary["solution"] = str(solution)
        if args.module:
            summary["dropin"] = str(write_dropin(out, args.module, solution, record["best"]["verdict"]))
    if args.json:
        print(json.dumps(summary, indent=1))
    elif not args.quiet:
        lines = [f"output: {out}"]
        if summary.get("solution"):
            lines.append(f"best solution: {summary['solution']}")
        if summary.get("dropin"):
            lines.append(f"drop-in module: {summary['dropin']}")
        print("\n".join(lines), file=sys.stderr)
    return 0
