"""``cuda-agent train``: the four stages, the evaluation service, data conversion, config checks.

    cuda-agent train single-turn --model M --tasks T --out runs/st [--eval-url URL] [--preset smoke]
                                 [--config stage.yaml] [--set learning_rate=1e-5 --set report_to=tensorboard]
    cuda-agent train rft         --model M --trajectories DIR --out runs/rft
    cuda-agent train value       --model M --trajectories DIR --out runs/value
    cuda-agent train agentic     --model M --tasks T --out runs/agentic [--eval-url URL]
    cuda-agent train recipe      --preset smoke|paper|cpu --out runs/recipe [--set rft.max_steps=10]
    cuda-agent train serve       --gpus 6,7 [--host 0.0.0.0 --token-file FILE] [--port 8420]
    cuda-agent train data        prompts|sft|value|verl --in SRC --out FILE
    cuda-agent train verl-check  [--no-paper] configs/verl/ppo_agentic.yaml [HYDRA_OVERRIDES...]
    cuda-agent train verl-launch [--dry-run] configs/verl/ppo_agentic.yaml [HYDRA_OVERRIDES...]   (options first)
    cuda-agent train tiny-model  OUT [--corpus FILES...]

Every stage resumes from the newest checkpoint in ``--out`` when run again. A stage's settings are
its own ``Config`` and TRL's arguments class, resolved by :mod:`cuda_agent.train.config`; a bad key
or value is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

_SETTINGS_HELP = ("\n\nSettings, later winning: the stage's defaults, --preset, --config YAML, --set. "
                  "Unknown keys and bad values are refused with one line.")

STAGE_HELP = {
    "single-turn": "stage 1: single-turn RL warm-up (TRL GRPO, sandbox reward)",
    "rft": "stage 2: rejection fine-tuning on cleaned positive-reward trajectories (TRL SFT)",
    "value": "stage 3: critic pretraining on trajectory states -> outcome reward",
    "agentic": "stage 4 on one node: multi-turn agentic GRPO with our tools (TRL); PPO+critic: verl",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="train_command", metavar="STAGE")
    for name, help_text in STAGE_HELP.items():
        p = sub.add_parser(name, help=help_text, description=help_text + _SETTINGS_HELP)
        p.add_argument("--model", help="model to start from (HF name or path)")
        if name in ("single-turn", "agentic"):
            p.add_argument("--tasks", help="task .py, directory of them, or synth/Ops-6K .parquet/.jsonl")
            p.add_argument("--eval-url", help="evaluation service URL (default: the sandbox in this process)")
        else:
            p.add_argument("--trajectories", help="agent trajectory JSONL file or directory")
        p.add_argument("--out", help="run directory, the trainer's output_dir (resumes from its newest checkpoint)")
        _settings_arguments(p, "KEY=VALUE", "any field of the stage's Config or of its TRL arguments class, "
                            "e.g. --set learning_rate=1e-5 --set report_to=tensorboard --set vllm_mode=server")
        p.add_argument("--config", help="YAML of keys to values (TRL's --config; an env: block sets variables)")
        p.set_defaults(train_action="stage", stage=name)

    p = sub.add_parser("recipe", help="the four stages chained (single-turn RL, RFT, value, agentic), resumable",
                       description="Single-turn RL -> RFT -> value pretraining -> agentic RL, with checkpoints, "
                       "evaluations and <out>/summary.json; run again with the same --out to resume." + _SETTINGS_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="run directory (default runs/recipe)")
    p.add_argument("--model", help="base model (default: smoke/cpu make a tiny model; paper: Qwen/Qwen3-8B)")
    p.add_argument("--tasks", help="tasks for the GRPO stages and evaluations (default: the demo's, shipped)")
    p.add_argument("--trajectories", help="agent trajectories for RFT and value (default: record the demo's)")
    p.add_argument("--eval-url", help="evaluation service URL for the GRPO stages' rollouts")
    p.add_argument("--stage-config", action="append", default=[], metavar="STAGE=FILE",
                   help="a stage's YAML (as train STAGE --config), e.g. rft=configs/trl/stages/rft.yaml")
    p.add_argument("--launcher", help='run each stage under this, e.g. "accelerate launch --config_file F"')
    p.add_argument("--stop-after", help="stop after this step (data, single_turn, eval_before_rft, rft, ...)")
    _settings_arguments(p, "STAGE.KEY=VALUE", "a stage's setting (STAGE: single-turn, rft, value, agentic) or "
                        "the recipe's own (recipe.demo_tasks=2), e.g. --set rft.max_steps=100")
    p.set_defaults(train_action="recipe")

    p = sub.add_parser("serve", help="the evaluation service: the sandbox behind HTTP on reserved GPUs")
    p.add_argument("--gpus", default="0", help="comma-separated GPU indices reserved for timing")
    p.add_argument("--host", default="127.0.0.1", help="bind address; anything but loopback needs a token")
    p.add_argument("--port", type=int, default=8420)
    p.add_argument("--token-file", help="file holding the secret every client must send (default: "
                   "$CUDA_AGENT_EVAL_TOKEN_FILE, else $CUDA_AGENT_EVAL_TOKEN)")
    p.add_argument("--per-gpu", type=int, default=2)
    p.add_argument("--max-queue", type=int, default=512)
    p.add_argument("--per-client", type=int, default=256, help="jobs one client (remote address) may have "
                   "queued or running at once")
    p.add_argument("--job-timeout-s", type=float, default=1200.0)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32"])
    from ..sandbox.commands.check_cmd import add_isolation_argument, add_rules_argument

    add_rules_argument(p)
    add_isolation_argument(p)
    p.set_defaults(train_action="serve")

    p = sub.add_parser("data", help="convert: tasks -> prompts / verl parquet; trajectories -> SFT / value rows")
    p.add_argument("kind", choices=["prompts", "sft", "value", "verl"])
    p.add_argument("--in", dest="src", required=True, help="tasks (prompts, verl) or trajectories (sft, value)")
    p.add_argument("--out", required=True, help=".jsonl (prompts, sft, value) or .parquet (verl)")
    p.add_argument("--min-reward", type=float, default=1.0, help="sft: keep episodes with at least this reward")
    p.add_argument("--mode", default="agentic", choices=["agentic", "single_turn"], help="verl: which rows")
    p.set_defaults(train_action="data")

    for name, action, text in (
            ("verl-check", "verl_check", ("compose a verl config with Hydra against the installed verl and check "
                                          "it, as a Ray worker will resolve it")),
            ("verl-launch", "verl_launch", ("check, then run verl's main_ppo with every variable the Ray workers "
                                            "need forwarded through ray_kwargs.ray_init.runtime_env.env_vars"))):
        p = sub.add_parser(name, help=text)
        p.add_argument("config")
        p.add_argument("overrides", nargs="*", help="Hydra overrides, as main_ppo takes them (e.g. trainer.nnodes=2)")
        p.add_argument("--no-paper", action="store_true", help="skip the paper-hyperparameter checks (smoke configs)")
        p.add_argument("--check-files", action="store_true",
                       help="also require model and data paths to exist and be absolute")
        if action == "verl_launch":
            p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
        p.set_defaults(train_action=action)

    p = sub.add_parser("tiny-model", help="write a tiny random-init causal LM + local tokenizer (tests, smoke runs)")
    p.add_argument("out")
    p.add_argument("--corpus", nargs="*", default=[], help="text files to train the tokenizer on")
    p.set_defaults(train_action="tiny")


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "train_action", None)
    if action is None:
        print("cuda-agent train: name a stage (single-turn, rft, value, agentic) or serve/data/verl-check/tiny-model",
              file=sys.stderr)
        return 2
    handlers = {"stage": _stage, "recipe": _recipe, "serve": _serve, "data": _data, "verl_check": _verl_check,
                "verl_launch": _verl_launch, "tiny": _tiny}
    from .config import ConfigError

    try:
        return handlers[action](args)
    except ConfigError as e:
        print(f"cuda-agent train: {e}", file=sys.stderr)
        return 2


def _settings_arguments(p: argparse.ArgumentParser, metavar: str, set_help: str) -> None:
    p.add_argument("--preset", default=None, choices=["paper", "smoke", "cpu"],
                   help="paper: the paper's numbers (default for a stage); smoke: the one-GPU demo (default for "
                   "recipe); cpu: smoke shrunk to a CPU plumbing check")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar=metavar,
                   help=f"{set_help}; the value is converted by the field's type; a list field takes several "
                   "space-separated values (--set 'tools=write_file compile verify submit')")
    p.add_argument("--print-config", action="store_true", help="print the resolved settings and exit")


def _stage(args) -> int:
    from .config import load_stage, resolved
    from .presets import stage_class

    values = {"model": args.model, "tasks": getattr(args, "tasks", None),
              "trajectories": getattr(args, "trajectories", None), "output_dir": args.out,
              "eval_url": getattr(args, "eval_url", None)}
    config, trainer = load_stage(args.stage, args.preset or "paper", args.config,
                                 {k: v for k, v in values.items() if v is not None}, args.overrides)
    if args.print_config:
        print(json.dumps(resolved(config, trainer), indent=2, default=str))
        return 0
    final = stage_class(args.stage)(config, trainer).run()
    print(f"{args.stage}: final model in {final}; metrics in {trainer.output_dir}/metrics.csv and metrics.png")
    return 0


def _recipe(args) -> int:
    from dataclasses import asdict

    from .config import ConfigError
    from .recipe import Recipe, load_recipe, setting_target, split_overrides

    preset = args.preset or "smoke"
    overrides = split_overrides(args.overrides)
    stage_configs = {}
    for item in args.stage_config:
        stage, sep, path = item.partition("=")
        if not sep:
            raise ConfigError(f"--stage-config {item!r}: expected STAGE=FILE")
        stage_configs[setting_target(stage, f"--stage-config {item}")] = path
    cfg = load_recipe(preset, {"out": args.out, "model": args.model, "tasks": args.tasks,
                               "trajectories": args.trajectories, "eval_url": args.eval_url,
                               "launcher": args.launcher, "stop_after": args.stop_after},
                      overrides.pop("recipe", []))
    recipe = Recipe(cfg, preset, stage_configs, overrides)
    if args.print_config:
        from .config import resolved

        recipe.check()
        stages = {s: resolved(*recipe.stage_config(s)) for s in ("single-turn", "rft", "value", "agentic")}
        print(json.dumps({"recipe": asdict(cfg), **stages}, indent=2, default=str))
        return 0
    summary = recipe.run()
    print(json.dumps({k: summary.get(k) for k in ("reward_curve", "learned", "grpo_kept_it",
                                                  "same_solutions_after_grpo", "stopped", "wall_s")},
                     indent=1, default=str))
    print(f"summary: {cfg.out}/summary.json")
    return 0


def _serve(args) -> int:
    from .auth import ServiceConfigError, read_token
    from .service import EvalService, EvalServiceConfig

    try:
        cfg = EvalServiceConfig(host=args.host, port=args.port, gpus=[int(g) for g in args.gpus.split(",") if g.strip()],
                                per_gpu=args.per_gpu, max_queue=args.max_queue, per_client=args.per_client,
                                job_timeout_s=args.job_timeout_s, token=read_token(args.token_file),
                                precision=args.precision, rules=args.rules,
                                isolation="none" if args.unsafe_no_isolation else "bwrap")
        service = EvalService(cfg).start()
    except ServiceConfigError as e:
        print(f"cuda-agent train serve: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"cuda-agent train serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"evaluation service on {service.url} (GPUs {cfg.gpus}, {cfg.per_gpu} jobs each; "
          f"token {'required' if cfg.token else 'off: this machine only'})", flush=True)
    service.serve_forever()
    return 0


def _data(args) -> int:
    from pathlib import Path

    from . import data as d
    from .trajectories import read_episodes, select_for_rft

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.kind == "verl":
        from .cluster.dataset import verl_rows, write_parquet

        rows = verl_rows(d.load_tasks(args.src), args.mode)
        write_parquet(rows, out)
    else:
        if args.kind == "prompts":
            rows = d.prompt_rows(d.load_tasks(args.src))
        elif args.kind == "sft":
            kept, stats = select_for_rft(read_episodes(args.src), args.min_reward)
            rows = d.sft_rows(kept)
            print(f"cleaning: {json.dumps(vars(stats))}")
        else:
            rows = d.value_rows(read_episodes(args.src))
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} rows -> {out}")
    return 0


def _verl_check(args, overrides: list[str] | None = None) -> int:
    from .cluster.schema import validate, verl_version

    errors = validate(args.config, args.overrides if overrides is None else overrides, paper=not args.no_paper,
                      check_files=args.check_files)
    for e in errors:
        print(f"{args.config}: {e}")
    if not errors:
        print(f"{args.config}: ok (verl {verl_version()})")
    return 1 if errors else 0


def _verl_launch(args) -> int:
    import os

    from .cluster.launch import LaunchError, env_overrides, forwarded_env, main_ppo_argv, printable, secret_values

    try:
        env = forwarded_env(args.config, args.overrides, os.environ)
        forwarding = env_overrides(env)
    except LaunchError as e:
        print(f"{args.config}: {e}")
        return 1
    for name in secret_values(env):
        fix = ("set it in each node's environment (ray start) instead" if name != "CUDA_AGENT_EVAL_TOKEN" else
               f"unset it: {name}_FILE is set" if os.environ.get(f"{name}_FILE") else
               f"put the token in a file every node can read and set {name}_FILE to its path instead")
        print(f"{args.config}: ${name} would be printed in verl's log (verl prints its ray init kwargs and "
              f"config), so it is not forwarded to Ray workers: {fix}")
        return 1
    if _verl_check(args, [*args.overrides, *forwarding]):
        return 1
    argv = main_ppo_argv(args.config, args.overrides, env)
    print(f"forwarded to Ray workers: {', '.join(env) or 'nothing'}\n{printable(argv)}", flush=True)
    if args.dry_run:
        return 0
    os.execv(argv[0], argv)


def _tiny(args) -> int:
    from pathlib import Path

    from .tiny import make_tiny_model

    corpus = [Path(p).read_text() for p in args.corpus]
    print(make_tiny_model(args.out, corpus))
    return 0
