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

from .agent_env import (
    REPLY_LOG_CHARS,
    TRAINING_TOOLS,
    SessionConfig,
    call_log,
    close_episode,
    initial_messages,
    start_episode,
)
from .common import DEFAULT_ACTOR, RunSettings, finish, resume_checkpoint, run_log, save_config
from .single_turn import GRPO_DEFAULTS, SandboxSettings
from .trl_env import CudaAgentEnv


class AgenticStage:
    TRAINER = "trl:GRPOConfig"
    DEFAULTS = dict(GRPO_DEFAULTS, max_completion_length=131072, max_tool_calling_iterations=150,
                    output_dir="runs/agentic")
    """``max_completion_length``: tokens over the whole episode (assistant + tool output), paper: 131k
    context; ``max_tool_calling_iterations``: tool rounds per episode (paper: up to 150 turns)."""

    @dataclass
    class Config(SandboxSettings, RunSettings):
        model: str = DEFAULT_ACTOR
        """Actor to start from (the RFT stage's ``final/``)."""
        tasks: str = ""
        max_tasks: int | None = None
        tools: list[str] = field(default_factory=lambda: list(TRAINING_TOOLS))
        """The episode's tools (:class:`~cuda_agent.train.agent_env.SessionConfig`)."""
        max_turns: int = 150
        """Turns stated in the agent's task prompt (paper: up to 150)."""
        reward_kind: str = "paper"
        target_speedup: float | None = None
        """None: episodes end on submit or budget (the agent's 1.05 early stop is off in training)."""
        run_root: str | None = None
        """Episode workspaces go under here; None: ``<output_dir>/episodes``."""
        keep_workspaces: bool = False

        def session(self) -> SessionConfig:
            return SessionConfig(tools=tuple(self.tools), max_turns=self.max_turns, reward_kind=self.reward_kind,
                                 target_speedup=self.target_speedup, run_root=self.run_root,
                                 keep_workspaces=self.keep_workspaces)

    def __init__(self, config: Config, args):
        self.config, self.args = config, args

    def rows(self, tasks) -> list[dict[str, Any]]:
        session = self.config.session()
        return [{"prompt": initial_messages(t, session), "task_name": t.name} for t in tasks]

    def run(self) -> Path:
        from datasets import Dataset
        from transformers import AutoTokenizer
        from trl import GRPOTrainer

        from .data import load_tasks
        from .metrics import trainer_callback

        cfg, args = self.config, self.args
        save_config(cfg, args)
        tasks = {t.name: t for t in load_tasks(cfg.tasks, cfg.max_tasks)}
        if not tasks:
            raise ValueError(f"{cfg.tasks}: no tasks")
        session = cfg.session()
        if session.run_root is None:
            session.run_root = str(Path(args.output_dir) / "episodes")
        evaluator = cfg.evaluator()
        log = run_log(cfg, args)
        stats: dict[str, float] = {}
        episodes: list[Any] = []

        def start(row: dict[str, Any]):
            ep = start_episode(tasks[row["task_name"]], session, evaluator)
            episodes.append(ep)
            return ep

        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        tokenizer.padding_side = "left"
        rollouts = Path(args.output_dir) / "rollouts.jsonl"

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
                    close_episode(ep, session)
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
        trainer.train(resume_from_checkpoint=resume_checkpoint(cfg, args))
        return finish(trainer, log)


def _last_text(completions: Any, i: int, chars: int = REPLY_LOG_CHARS) -> str:
    """The end of rollout ``i``'s last message, whatever form TRL passes completions in."""
    try:
        c = completions[i]
        if isinstance(c, list):
            c = c[-1].get("content", "") if c else ""
        return str(c)[-chars:]
    except (IndexError, TypeError, AttributeError):
        return ""
