"""``cuda-agent train recipe``: the paper's four stages chained, with checkpoints, a summary, and
resume after a kill.

    cuda-agent train recipe --preset smoke --out runs/recipe            # the "it learns" demo, one GPU
    cuda-agent train recipe --preset paper --tasks tasks.parquet --trajectories runs/agent \\
        --out runs/paper --eval-url http://evalhost:8420 \\
        --launcher "accelerate launch --config_file configs/trl/accelerate/fsdp2_8gpu.yaml"

The steps, in order (:data:`STEPS`); step ``s`` writes into ``<out>/<s>/`` and ends by writing
``<out>/<s>/done.json``:

=================  ============================================================================
``data``           only without ``--trajectories``: the demo's tasks (shipped in the package) into
                   ``data/tasks/``, their honest episodes replayed through the agent loop
                   (``data/honest.jsonl``), and, without ``--model``, a tiny model (``data/tiny``)
``single_turn``    stage 1, single-turn GRPO on the tasks
``eval_before_rft`` the stage-1 policy as an agent on the tasks: one reward each (``evaluate``)
``rft``            stage 2 on the trajectories (the honest episodes, or ``--trajectories``)
``eval_after_rft`` the RFT policy as an agent
``value``          stage 3: the critic, from the RFT actor, on the trajectories (the demo adds the
                   evaluated episodes, so the critic sees failures and successes)
``agentic``        stage 4 (TRL, GRPO with our tools) from the RFT actor
``eval_after_grpo`` the final policy as an agent
=================  ============================================================================

Run it again with the same ``--out`` to resume: a step whose ``done.json`` exists is skipped; a
training stage stopped part-way resumes from its newest checkpoint; an evaluation or the data step
stopped part-way starts over. ``<out>/summary.json`` is rewritten after every step: each step's
status and seconds, the reward curve (before RFT, after RFT, after GRPO), ``learned`` (below 0
before RFT and above 0 after), ``grpo_kept_it`` (no lower after GRPO), and per evaluated task the
solution's fingerprint, so ``same_solutions_after_grpo`` tells a reward moved by timing from one
moved by the policy. ``<out>/reward_curve.png`` draws it.

Each stage's settings: the preset, then ``--stage-config STAGE=FILE.yaml``, then ``--set
STAGE.key=value`` (:mod:`cuda_agent.train.config`); the recipe wires in each stage's model, data and
``output_dir``. ``--set recipe.key=value`` sets a :class:`RecipeConfig` field. Every stage's
configuration is resolved before the first step runs, so a typo fails at once.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, load_stage, merged_yaml, parse_layers


@dataclass
class RecipeConfig:
    """The recipe's own settings (``--set recipe.<field>=value``)."""

    out: str = "runs/recipe"
    model: str | None = None
    """The base model; None: a tiny random-init model made in the ``data`` step (the demo)."""
    tasks: str | None = None
    """Tasks for the GRPO stages and the evaluations; None: the demo's tasks."""
    trajectories: str | None = None
    """Agent trajectories for RFT and value pretraining; None: the ``data`` step records the demo's
    honest episodes."""
    eval_url: str | None = None
    """The evaluation service for the GRPO stages' rollouts; None: the sandbox in this process, or the
    service this run starts (``serve``)."""
    serve: bool = False
    """Without ``eval_url`` and with a GPU: start the evaluation service in this process (GPU 0) for
    the stages' rollouts, as the measured demo did."""
    demo_dir: str | None = None
    """(task, honest solution) pairs as ``<name>/task.py`` + ``<name>/solution/``; None: the packaged demo."""
    demo_tasks: int = 4
    """How many of the demo's pairs to use."""
    tiny_hidden_size: int = 256
    tiny_layers: int = 4
    tiny_intermediate_size: int = 768
    evaluate: bool = True
    """Run the evaluation steps (the policy as an agent, greedy, with the agent's local transformers backend)."""
    eval_max_turns: int = 10
    """Turns per evaluated episode, and the budget the demo's episodes are recorded with (the agent's
    prompt states it; a memorizing model reproduces its episodes only from the very prompt)."""
    eval_max_new_tokens: int = 3072
    eval_before_rft_max_turns: int = 2
    """Before RFT the policy writes noise: fewer, shorter turns."""
    eval_before_rft_max_new_tokens: int = 256
    stop_after: str | None = None
    """Stop after this step (e.g. ``rft``); run again without it to go on."""
    budget_s: float | None = None
    """Do not start a step after this many seconds (the run stops; run again to resume)."""
    launcher: str | None = None
    """Run each training stage as ``<launcher> -m cuda_agent.cli train <stage> --preset P --config
    <out>/<stage>/stage.yaml --set ...`` (e.g. ``accelerate launch --config_file ...``); None: in this process."""


@dataclass
class Step:
    name: str
    run: Callable[[Recipe], dict[str, Any]]
    when: Callable[[Recipe], bool] = lambda r: True
    """False: the step does not apply to this run (e.g. ``data`` with given trajectories)."""


class Recipe:
    """One recipe run in ``cfg.out``."""

    def __init__(self, cfg: RecipeConfig, preset: str = "smoke", stage_configs: dict[str, str] | None = None,
                 overrides: dict[str, list[str]] | None = None):
        self.cfg, self.preset = cfg, preset
        self.stage_configs = stage_configs or {}
        self.overrides = overrides or {}
        self.out = Path(cfg.out)
        self.summary: dict[str, Any] = {}
        self.eval_url = cfg.eval_url

    # --- where things are -------------------------------------------------------------------
    @property
    def demo(self) -> bool:
        return self.cfg.trajectories is None

    @property
    def base_model(self) -> str:
        return self.cfg.model or str(self.out / "data" / "tiny")

    @property
    def tasks(self) -> str:
        return self.cfg.tasks or str(self.out / "data" / "tasks")

    @property
    def trajectories(self) -> str:
        return self.cfg.trajectories or str(self.out / "data" / "honest.jsonl")

    def final(self, step: str) -> str:
        return str(self.out / step / "final")

    def stage_values(self, stage: str) -> dict[str, Any]:
        """What the recipe wires into each stage: its model, its data, its ``output_dir``."""
        step = stage.replace("-", "_")
        values: dict[str, Any] = {"output_dir": str(self.out / step)}
        if stage == "single-turn":
            values.update(model=self.base_model, tasks=self.tasks, eval_url=self.eval_url)
        elif stage == "rft":
            values.update(model=self.final("single_turn"), trajectories=self.trajectories)
        elif stage == "value":
            values.update(model=self.final("rft"), trajectories=str(self.out / "value" / "trajectories.jsonl"))
        else:
            values.update(model=self.final("rft"), tasks=self.tasks, eval_url=self.eval_url)
        return values

    def stage_config(self, stage: str):
        return load_stage(stage, self.preset, self.stage_configs.get(stage), self.stage_values(stage),
                          self.overrides.get(stage, []))

    # --- steps -----------------------------------------------------------------------------
    def data(self) -> dict[str, Any]:
        """Demo tasks, honest episodes through the agent loop, and (without a model) a tiny model."""
        from .agent_env import SessionConfig, initial_messages
        from .data import single_turn_prompt
        from .demo import honest_pairs, record_episodes
        from .solution_io import read_files
        from .tiny import TinyModelConfig, make_tiny_model
        from .trajectories import read_episodes

        cfg, d = self.cfg, self.out / "data"
        pairs = honest_pairs(cfg.demo_dir)[: cfg.demo_tasks]
        (d / "tasks").mkdir(parents=True)
        if cfg.tasks is None:
            for task, _ in pairs:
                (d / "tasks" / f"{task.name}.py").write_text(task.source)
        recs = record_episodes(pairs, d / "honest.jsonl", d / "episodes", SessionConfig(max_turns=cfg.eval_max_turns),
                               workers=len(pairs))
        result: dict[str, Any] = {"tasks": [t.name for t, _ in pairs],
                                  "honest_rewards": {r["task"]["name"]: r["reward"] for r in recs}}
        if cfg.model is None:
            episodes = list(read_episodes(d / "honest.jsonl"))
            corpus = [json.dumps(m) for e in episodes for m in e.messages] + [json.dumps(e.tools) for e in episodes[:1]]
            corpus += [m["content"] for t, _ in pairs
                       for m in initial_messages(t, SessionConfig()) + single_turn_prompt(t)]
            corpus += [text for _, s in pairs for text in read_files(s).values()]
            tiny = TinyModelConfig(vocab_size=4096, hidden_size=cfg.tiny_hidden_size, num_hidden_layers=cfg.tiny_layers,
                                   intermediate_size=cfg.tiny_intermediate_size, max_position_embeddings=32768)
            result["model"] = str(make_tiny_model(d / "tiny", corpus, tiny))
        return result

    def train(self, stage: str) -> dict[str, Any]:
        from .common import resume_checkpoint
        from .presets import stage_class

        config, args = self.stage_config(stage)
        resumed = resume_checkpoint(config, args)
        if self.cfg.launcher:
            final = self._launch(stage, Path(args.output_dir))
        else:
            final = stage_class(stage)(config, args).run()
        rows = _rows(Path(args.output_dir))
        return {"final": str(final), "resumed_from": resumed, "steps": max((int(r["step"]) for r in rows), default=0),
                "last_row": rows[-1] if rows else {}}

    def _launch(self, stage: str, out: Path) -> Path:
        """The stage in its own processes (``launch_command``), resolving the same settings there: the
        preset, ``stage.yaml`` (the recipe's wiring under the stage's YAML) and the ``--set`` overrides."""
        out.mkdir(parents=True, exist_ok=True)
        (out / "stage.yaml").write_text(merged_yaml(self.stage_values(stage), self.stage_configs.get(stage)))
        cmd = launch_command(self.cfg.launcher, stage, self.preset, out / "stage.yaml", self.overrides.get(stage, []))
        print("  $", shlex.join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        return out / "final"

    def value(self) -> dict[str, Any]:
        """The critic's data: the trajectories, plus (demo) the evaluated episodes so far."""
        d = self.out / "value"
        d.mkdir(parents=True, exist_ok=True)
        sources = [Path(self.trajectories)]
        if self.demo:
            sources += [self.out / s / "episodes.jsonl" for s in ("eval_before_rft", "eval_after_rft")]
        text = "".join(_jsonl_text(s) for s in sources if s.exists())
        (d / "trajectories.jsonl").write_text(text)
        return self.train("value")

    def evaluation(self, step: str, model: str, max_turns: int, max_new_tokens: int) -> dict[str, Any]:
        from .data import load_tasks
        from .demo import evaluate_policy

        d = self.out / step
        rewards = evaluate_policy(model, load_tasks(self.tasks), d / "episodes", max_turns=max_turns,
                                  max_new_tokens=max_new_tokens, trajectories=d / "episodes.jsonl")
        return {"rewards": rewards, "episodes": episode_facts(d / "episodes.jsonl")}

    # --- the run ---------------------------------------------------------------------------
    def check(self) -> None:
        """Resolve every stage's configuration now: a bad key fails before the first step."""
        if not self.demo and (self.cfg.tasks is None or self.cfg.model is None):
            raise ConfigError("recipe: with --trajectories, give --tasks and --model too (without them the recipe "
                              "records the demo's episodes and makes a tiny model)")
        for stage in ("single-turn", "rft", "value", "agentic"):
            self.stage_config(stage)

    def run(self, on_step: Callable[[str, str], None] | None = None) -> dict[str, Any]:
        cfg = self.cfg
        if cfg.stop_after and cfg.stop_after not in STEP_NAMES:
            raise ConfigError(f"stop_after {cfg.stop_after!r}: expected one of {', '.join(STEP_NAMES)}")
        self.check()
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "recipe.json").write_text(json.dumps({"preset": self.preset, "config": asdict(cfg),
                                                          "stage_configs": self.stage_configs,
                                                          "overrides": self.overrides}, indent=2) + "\n")
        self.summary = {"preset": self.preset, "out": str(self.out), "steps": {}}
        t0 = time.perf_counter()
        service = self._start_service()
        try:
            for step in STEPS:
                if not step.when(self):
                    continue
                done = self.out / step.name / "done.json"
                if done.exists():
                    self.summary["steps"][step.name] = {**json.loads(done.read_text()), "status": "skipped (complete)"}
                    continue
                if cfg.budget_s is not None and time.perf_counter() - t0 > cfg.budget_s:
                    self.summary["stopped"] = f"before {step.name}: past the {cfg.budget_s:.0f} s budget"
                    break
                print(f"== {step.name} (at {time.perf_counter() - t0:.0f} s)", flush=True)
                if step.name.startswith("eval_") or step.name == "data":
                    shutil.rmtree(self.out / step.name, ignore_errors=True)  # a part-done one starts over
                if on_step:
                    on_step(step.name, "start")
                t = time.perf_counter()
                try:
                    result = step.run(self)
                except BaseException as e:
                    self.summary["steps"][step.name] = {"status": f"failed: {type(e).__name__}: {e}"[:2000],
                                                        "s": round(time.perf_counter() - t, 1)}
                    raise
                finally:
                    if on_step:
                        on_step(step.name, "end")
                result = {**result, "s": round(time.perf_counter() - t, 1)}
                done.parent.mkdir(parents=True, exist_ok=True)
                tmp = done.with_suffix(".tmp")
                tmp.write_text(json.dumps(result, indent=1, default=str))
                tmp.replace(done)  # complete or absent, never half-written
                self.summary["steps"][step.name] = {**result, "status": "done"}
                print(f"   {step.name}: {result['s']} s", flush=True)
                self._write_summary(t0)
                if step.name == cfg.stop_after:
                    self.summary["stopped"] = f"after {step.name} (stop_after)"
                    break
        finally:
            if service is not None:
                service.stop()
            self._write_summary(t0)
        return self.summary

    def _start_service(self):
        """The evaluation service in this process on GPU 0 (``serve``), when there is a GPU and no URL."""
        from .common import has_cuda

        if self.eval_url or not self.cfg.serve or not has_cuda():
            return None
        from .service import EvalService, EvalServiceConfig

        service = EvalService(EvalServiceConfig(port=0, gpus=[0], per_gpu=2)).start()
        self.eval_url = service.url
        return service

    def _write_summary(self, t0: float) -> None:
        s = self.summary
        s["wall_s"] = round(time.perf_counter() - t0, 1)
        curve = [(label, s["steps"][step]["rewards"]) for step, label in CURVE
                 if s["steps"].get(step, {}).get("rewards")]
        s["reward_curve"] = [{"point": label, "rewards": rs, "mean": sum(rs) / len(rs),
                              "pass_rate": sum(r > 0 for r in rs) / len(rs)} for label, rs in curve]
        means = [p["mean"] for p in s["reward_curve"]]
        s["learned"] = len(means) >= 2 and means[0] < 0 < means[1]
        s["grpo_kept_it"] = len(means) >= 3 and means[2] >= means[1] - 1e-9
        after_rft = s["steps"].get("eval_after_rft", {}).get("episodes")
        after_grpo = s["steps"].get("eval_after_grpo", {}).get("episodes")
        if after_rft and after_grpo:  # the same files after GRPO: a reward that moved is timing, not the policy
            s["same_solutions_after_grpo"] = [a["fingerprint"] is not None and a["fingerprint"] == b["fingerprint"]
                                              for a, b in zip(after_rft, after_grpo)]
        s["checkpoints"] = {step: sorted(d.name for d in (self.out / step).iterdir()
                                         if d.is_dir() and (d.name == "final" or d.name.startswith("checkpoint-")))
                            for step in ("single_turn", "rft", "value", "agentic") if (self.out / step).is_dir()}
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "summary.json").write_text(json.dumps(s, indent=1, default=str))
        if curve:
            plot_curve(curve, _rows(self.out / "rft"), self.out / "reward_curve.png")


STEPS: list[Step] = [
    Step("data", Recipe.data, when=lambda r: r.demo),
    Step("single_turn", lambda r: r.train("single-turn")),
    Step("eval_before_rft", lambda r: r.evaluation("eval_before_rft", r.final("single_turn"),
                                                   r.cfg.eval_before_rft_max_turns,
                                                   r.cfg.eval_before_rft_max_new_tokens),
         when=lambda r: r.cfg.evaluate),
    Step("rft", lambda r: r.train("rft")),
    Step("eval_after_rft", lambda r: r.evaluation("eval_after_rft", r.final("rft"), r.cfg.eval_max_turns,
                                                  r.cfg.eval_max_new_tokens), when=lambda r: r.cfg.evaluate),
    Step("value", Recipe.value),
    Step("agentic", lambda r: r.train("agentic")),
    Step("eval_after_grpo", lambda r: r.evaluation("eval_after_grpo", r.final("agentic"), r.cfg.eval_max_turns,
                                                   r.cfg.eval_max_new_tokens), when=lambda r: r.cfg.evaluate),
]
STEP_NAMES = [s.name for s in STEPS]
CURVE = [("eval_before_rft", "before RFT"), ("eval_after_rft", "after RFT"), ("eval_after_grpo", "after GRPO")]
"""The reward curve's points: (step, label)."""


def load_recipe(preset: str = "smoke", values: dict[str, Any] | None = None, overrides: list[str] = ()) -> RecipeConfig:
    """:class:`RecipeConfig` from the preset, ``values`` and ``key=value`` overrides (typed by TRL's parser)."""
    from .presets import PRESETS

    if preset not in PRESETS:
        raise ConfigError(f"preset {preset!r}: expected one of {', '.join(PRESETS)}")
    given = {k: v for k, v in (values or {}).items() if v is not None}
    layers = {f"preset {preset}": PRESETS[preset]("recipe"), "given values": given}
    (cfg,) = parse_layers([RecipeConfig], "recipe", layers, None, overrides)
    return cfg


def setting_target(name: str, source: str) -> str:
    """A stage name as the user wrote it (``single_turn`` or ``single-turn``), or ``recipe``."""
    from . import STAGES

    names = {s.replace("-", "_"): s for s in [*STAGES, "recipe"]}
    stage = names.get(name.strip().replace("-", "_"))
    if stage is None:
        raise ConfigError(f"{source}: {name!r} is not one of {', '.join(names.values())}")
    return stage


def split_overrides(items: list[str]) -> dict[str, list[str]]:
    """``STAGE.key=value`` (STAGE: single-turn, rft, value, agentic, recipe) -> per-stage ``key=value`` lists."""
    out: dict[str, list[str]] = {}
    for item in items:
        head, dot, rest = item.partition(".")
        if not dot or "=" in head or "=" not in rest:
            raise ConfigError(f"--set {item!r}: expected STAGE.key=value (e.g. rft.max_steps=10)")
        out.setdefault(setting_target(head, f"--set {item}"), []).append(rest)
    return out


def launch_command(launcher: str, stage: str, preset: str, stage_file: Path, overrides: list[str] = ()) -> list[str]:
    """``<launcher> -m cuda_agent.cli train <stage> --preset P --config stage.yaml [--set k=v ...]``."""
    sets = [a for item in overrides for a in ("--set", item)]
    return [*shlex.split(launcher), "-m", "cuda_agent.cli", "train", stage, "--preset", preset,
            "--config", str(stage_file), *sets]


def episode_facts(trajectories: Path) -> list[dict[str, Any]]:
    """Per evaluated episode: task, reward, the best solution's fingerprint and its speedups."""
    facts = []
    for line in _jsonl_text(trajectories).splitlines():
        rec = json.loads(line)
        best = rec.get("best") or {}
        facts.append({"task": rec["task"]["name"], "reward": rec["reward"], "turns": rec["turns"],
                      "ended_by": rec["ended_by"], "fingerprint": best.get("fingerprint"),
                      "speedup_vs_eager": best.get("speedup_vs_eager"),
                      "speedup_vs_compile": best.get("speedup_vs_compile")})
    return facts


def plot_curve(curve: list[tuple[str, list[float]]], rft_rows: list[dict], path: Path) -> None:
    """Mean and per-task reward at each curve point, beside the RFT loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = list(range(len(curve)))
    a1.plot(xs, [sum(r) / len(r) for _, r in curve], marker="o", label="mean reward")
    for i, (_, rs) in enumerate(curve):
        a1.scatter([i] * len(rs), rs, alpha=0.4, color="gray")
    a1.axhline(0, color="k", lw=0.5)
    a1.set_xticks(xs, [n for n, _ in curve])
    a1.set_ylabel("sandbox reward (paper: -1, 1, 2, 3)")
    a1.set_title("the policy as a CUDA agent")
    a1.legend()
    rows = [r for r in rft_rows if r.get("loss")]
    a2.plot([int(r["step"]) for r in rows], [float(r["loss"]) for r in rows])
    if rows:
        a2.set_yscale("log")
    a2.set_xlabel("RFT step")
    a2.set_ylabel("SFT loss (assistant tokens)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _rows(run_dir: Path) -> list[dict]:
    import csv

    if not (run_dir / "metrics.csv").exists():
        return []
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _jsonl_text(path: Path) -> str:
    """A JSONL file's text (a directory: its ``*.jsonl`` files), ending in a newline."""
    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path] if path.exists() else []
    text = "".join(f.read_text() for f in files)
    return text if not text or text.endswith("\n") else text + "\n"
