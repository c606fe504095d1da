"""Stage 4 on one node: multi-turn agentic RL with TRL's ``GRPOTrainer`` and our tools.

TRL (>= 1.x) runs the tool-calling loop itself when given an ``environment_factory``: each
rollout gets an environment instance whose public methods are the tools (schemas from their
signatures and docstrings), ``reset(**row)`` starts the episode, and ``get_reward()`` scores
it. That class is :class:`~cuda_agent.train.trl_env.CudaAgentEnv`: each tool method is one call
into the agent's own episode engine, so the model sees exactly the tools, results and reward of
``cuda-agent optimize``.

What this is not: the paper's PPO with a critic. TRL has no PPO-with-critic trainer for
multi-turn tool use; GRPO (group-relative advantages, no value model) is what runs here. The
paper's recipe (GAE gamma=1 lambda=0.95 with the pretrained critic) runs on verl:
:mod:`cuda_agent.train.cluster`, ``configs/verl/ppo_agentic.yaml``.

Tool output is masked from the loss by TRL (its ``tool_mask``); the sequence budget is
``max_completion_length`` tokens over all turns and ``max_tool_calling_iterations`` rounds.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .agent_env import REPLY_LOG_CHARS, SessionConfig, call_log, close_episode, initial_messages, start_episode
from .common import (
    DEFAULT_ACTOR,
    GRPOSettings,
    OptimConfig,
    RunConfig,
    finish,
    resume_checkpoint,
    save_config,
    training_arguments,
)
from .single_turn import SandboxSettings
from .trl_env import CudaAgentEnv

class AgenticStage:
    @dataclass
    class Config(GRPOSettings):
        model: str = DEFAULT_ACTOR
        """Actor to start from (the RFT stage's ``final/``)."""
        tasks: str = ""
        max_tasks: int | None = None
        max_completion_length: int = 131072
        """Tokens over the whole episode (assistant + tool output), paper: 131k context."""
        max_tool_calling_iterations: int = 150
        """Tool rounds per episode (paper: up to 150 turns)."""
        session: SessionConfig = field(default_factory=SessionConfig)
        sandbox: SandboxSettings = field(default_factory=SandboxSettings)
        optim: OptimConfig = field(default_factory=OptimConfig)
        run: RunConfig = field(default_factory=lambda: RunConfig(out="runs/agentic"))

    def __init__(self, config: Config):
        self.config = config

    def rows(self, tasks) -> list[dict[str, Any]]:
        return [{"prompt": initial_messages(t, self.config.session), "task_name": t.name} for t in tasks]

    def run(self) -> Path:
        from datasets import Dataset
        from transformers import AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer

        from .data import load_tasks
        from .metrics import RunLog, trainer_callback

        cfg = self.config
        save_config(cfg, cfg.run.out)
        tasks = {t.name: t for t in load_tasks(cfg.tasks, cfg.max_tasks)}
        if not tasks:
            raise ValueError(f"{cfg.tasks}: no tasks")
        if cfg.session.run_root is None:
            cfg.session.run_root = str(Path(cfg.run.out) / "episodes")
        evaluator = cfg.sandbox.evaluator()
        log = RunLog(cfg.run.out, tensorboard=cfg.run.tensorboard)
        stats: dict[str, float] = {}
        episodes: list[Any] = []

        def start(row: dict[str, Any]):
            ep = start_episode(tasks[row["task_name"]], cfg.session, evaluator)
            episodes.append(ep)
            return ep

        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        tokenizer.padding_side = "left"
        args = GRPOConfig(**training_arguments(cfg.optim, cfg.run), **cfg.grpo_arguments(),
                          max_completion_length=cfg.max_completion_length,
                          max_tool_calling_iterations=cfg.max_tool_calling_iterations)

        rollouts = Path(cfg.run.out) / "rollouts.jsonl"

        def episode_stats(completions=None, **_: Any) -> list[None]:
            """Not a reward (returns None, which TRL skips): logs the finished episodes, in the
            run's metrics and one line each in ``rollouts.jsonl`` (tools called, reward, the end
            of the model's last message)."""
            submitted = [ep.ended is not None and ep.ended.ended_by == "submitted" for ep in episodes]
            scores = [ep.reward for ep in episodes]
            rewards = [r for r in scores if r is not None]  # harness errors: left out, counted
            with open(rollouts, "a") as f:
                for i, ep in enumerate(episodes):
                    f.write(json.dumps({"task": ep.env.task.name, "reward": scores[i], "submitted": submitted[i],
                                        "calls": call_log(ep), "last_message": _last_text(completions, i)}) + "\n")
                    close_episode(ep, cfg.session)
            if scores:
                stats["harness_error_rate"] = sum(r is None for r in scores) / len(scores)
            if rewards:
                from .rlmath import reward_distribution

                stats.update(sandbox_reward_mean=sum(rewards) / len(rewards),
                             pass_rate=sum(r > 0 for r in rewards) / len(scores),
                             submit_rate=sum(submitted) / len(episodes),
                             verified_rate=sum(bool(s or ep.verdicts) for s, ep in zip(submitted, episodes)) / len(episodes),
                             **reward_distribution(rewards))
            episodes.clear()
            return [None] * len(completions)

        trainer = GRPOTrainer(model=cfg.model, reward_funcs=[episode_stats], args=args,
                              train_dataset=Dataset.from_list(self.rows(tasks.values())), processing_class=tokenizer,
                              environment_factory=functools.partial(CudaAgentEnv, start), callbacks=[trainer_callback(log, stats)])
        trainer.train(resume_from_checkpoint=resume_checkpoint(cfg.run))
        return finish(trainer, cfg.run.out, log)


def _last_text(completions: Any, i: int, chars: int = REPLY_LOG_CHARS) -> str:
    """The end of rollout ``i``'s last message, whatever form TRL passes completions in."""
    try:
        c = completions[i]
        if isinstance(c, list):
            c = c[-1].get("content", "") if c else ""
        return str(c)[-chars:]
    except (IndexError, TypeError, AttributeError):
        return ""
