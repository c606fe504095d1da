"""Stage 4 on one node: multi-turn agentic RL with TRL's ``GRPOTrainer`` and our tools.

TRL (>= 1.x) runs the tool-calling loop itself when given an ``environment_factory``: each
rollout gets an environment instance whose public methods are the tools (schemas from their
signatures and docstrings), ``reset(**row)`` starts the episode, and ``get_reward()`` scores
it. :class:`CudaAgentEnv` is that class, written out: one method per training tool, each one
:meth:`cuda_agent.agent.Episode.call` into the agent's own episode engine (verify through the
evaluation service), so the model sees exactly the tools, results and reward of ``cuda-agent
optimize``. TRL parses the replies (the tokenizer's response template, as our drivers do:
``agent.backends.toolcall_text.parse_reply``) and counts turns and tokens.

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

def _documented(fn):
    """Give a tool method the Google docstring of the agent tool it calls (TRL renders the schema
    from the signature and this docstring; ``test_trl_renders_our_tools_exactly_as_the_agent_presents_them``
    checks that the result equals the agent's own schema)."""
    from ..agent.tools import load_tool

    tool = load_tool(fn.__name__)
    args = [f"    {k}: {' '.join(str(p.get('description') or k).split())}" for k, p in tool.parameters["properties"].items()]
    fn.__doc__ = " ".join(tool.description.split()) + ("\n\nArgs:\n" + "\n".join(args) if args else "")
    return fn


class CudaAgentEnv:
    """TRL's environment: one method per training tool, each one call into the agent's Episode
    (:meth:`cuda_agent.agent.Episode.call`: the same tools, rules, rendering and reward as every
    other driver). ``start(row) -> Episode`` begins an episode from a dataset row. An optional
    argument defaults to None, not ``X | None``: TRL would render that as "nullable", which the
    agent's schema (what the RFT data shows) does not have."""

    def __init__(self, start=None):
        self._start, self.episode, self.final_reward = start, None, None

    def reset(self, **row: Any) -> None:
        self.episode, self.final_reward = self._start(row), None
        return None  # the prompt row already holds the agent's task message

    def get_reward(self) -> float:
        if self.final_reward is None:
            self.final_reward = self.episode.reward if self.episode is not None else -1.0
        return self.final_reward

    def _call(self, name: str, **arguments: Any) -> str:
        return self.episode.call(name, {k: v for k, v in arguments.items() if v is not None})

    @_documented
    def bash(self, command: str, timeout: int = None):  # noqa: RUF013 - see the class docstring
        return self._call("bash", command=command, timeout=timeout)

    @_documented
    def compile(self):
        return self._call("compile")

    @_documented
    def edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool = None):  # noqa: RUF013
        return self._call("edit_file", path=path, old_string=old_string, new_string=new_string, replace_all=replace_all)

    @_documented
    def glob(self, pattern: str = None):  # noqa: RUF013
        return self._call("glob", pattern=pattern)

    @_documented
    def grep(self, pattern: str, path: str = None, glob: str = None, ignore_case: bool = None):  # noqa: RUF013
        return self._call("grep", pattern=pattern, path=path, glob=glob, ignore_case=ignore_case)

    @_documented
    def read_file(self, path: str, offset: int = None, limit: int = None):  # noqa: RUF013
        return self._call("read_file", path=path, offset=offset, limit=limit)

    @_documented
    def submit(self, summary: str = None):  # noqa: RUF013
        return self._call("submit", summary=summary)

    @_documented
    def verify(self):
        return self._call("verify")

    @_documented
    def write_file(self, path: str, content: str):
        return self._call("write_file", path=path, content=content)


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
            rewards = [ep.reward for ep in episodes]
            with open(rollouts, "a") as f:
                for i, ep in enumerate(episodes):
                    f.write(json.dumps({"task": ep.env.task.name, "reward": rewards[i], "submitted": submitted[i],
                                        "calls": call_log(ep), "last_message": _last_text(completions, i)}) + "\n")
                    close_episode(ep, cfg.session)
            if rewards:
                from .rlmath import reward_distribution

                stats.update(sandbox_reward_mean=sum(rewards) / len(rewards),
                             pass_rate=sum(r > 0 for r in rewards) / len(rewards),
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
