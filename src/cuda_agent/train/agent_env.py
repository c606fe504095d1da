"""One training episode on the agent's tools, with verification routed to an Evaluator.

The agent package (:mod:`cuda_agent.agent`) owns the workspace and the tools; its ``verify``
runs the sandbox in the calling process. During training that process sits on a training or
generation GPU, so :class:`AgentSession` runs ``verify`` (and the verification ``submit``
does on unverified changes) through an :class:`~cuda_agent.train.evaluator.Evaluator`: the
evaluation service on a cluster, the in-process sandbox on one node. Every other tool runs
unchanged through ``Environment.execute``. ``profile`` needs a GPU too and is left out of the
training tool set by default (:data:`TRAINING_TOOLS`).

Both agentic trainers use it: TRL's ``environment_factory`` (:mod:`.agentic`) and the verl
agent loop (:mod:`.cluster.agent_loop`). The reward is the outcome reward of the best verified
solution (the agent's result), -1 when there is none; None (the episode is left out of the batch)
when there is none and the last verification was a ``harness_error``, which says nothing about the
policy's kernel.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sandbox.reward import outcome_reward
from ..tasks import Task
from .evaluator import Evaluator, LocalEvaluator

TRAINING_TOOLS = ("bash", "compile", "edit_file", "glob", "grep", "read_file", "submit", "verify", "write_file")
"""In name order: TRL lists an environment's tool methods by name, so the prompts of recorded
trajectories (RFT data) and of TRL's agentic rollouts show the tools in the same order."""
OVER = "The episode is over (you submitted); no further tool calls are run."


REPLY_LOG_CHARS = 300


@dataclass
class SessionConfig:
    """Per-episode settings of training rollouts."""

    tools: tuple[str, ...] = TRAINING_TOOLS
    max_turns: int = 150
    """Paper: up to 150 turns."""
    reward_kind: str = "paper"
    target_speedup: float | None = None
    """None: episodes end on submit or budget (the agent's 1.05 early stop is off in training)."""
    run_root: str | None = None
    """Workspaces go under here (one directory per episode); None: a temporary directory."""
    keep_workspaces: bool = False


def agent_config(cfg: SessionConfig):
    from ..agent import AgentConfig

    return AgentConfig(max_turns=cfg.max_turns, target_speedup=cfg.target_speedup, verify_on_submit=False,
                       tools=tuple(cfg.tools))


def initial_messages(task: Task, cfg: SessionConfig) -> list[dict[str, str]]:
    """The agent's own system and task prompts (``agent/templates``), rendered as its loop does."""
    from ..agent import Agent

    probe = Agent.__new__(Agent)  # task_message() reads only env.task and config
    probe.env = type("_Env", (), {"task": task})()
    probe.config = agent_config(cfg)
    from ..agent.templating import render

    return [{"role": "system", "content": render("system.md")}, {"role": "user", "content": probe.task_message()}]


def tool_schemas(cfg: SessionConfig) -> list[dict[str, Any]]:
    from ..agent.tools import load_tool

    return [load_tool(name).schema() for name in cfg.tools]


@dataclass
class AgentSession:
    task: Task
    config: SessionConfig = field(default_factory=SessionConfig)
    evaluator: Evaluator = field(default_factory=LocalEvaluator)
    submitted: bool = field(default=False, init=False)
    verdicts: list[dict[str, Any]] = field(default_factory=list, init=False)
    calls: list[dict[str, Any]] = field(default_factory=list, init=False)
    """One entry per tool call: the tool's name and the start of its reply (for rollout logs)."""

    def __post_init__(self) -> None:
        from ..agent import Environment

        root = Path(self.config.run_root) if self.config.run_root else None
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"{self.task.name}_", dir=root))
        self.env = Environment(self.task, self.run_dir, agent_config(self.config))

    # ------------------------------------------------------------------ tools
    def schemas(self) -> list[dict[str, Any]]:
        return self.env.schemas()

    def execute(self, name: str, arguments: Any) -> str:
        """Run one tool call; returns the text the model sees."""
        reply = self._execute(name, arguments)
        self.calls.append({"tool": name, "reply": reply[:REPLY_LOG_CHARS]})
        return reply

    def _execute(self, name: str, arguments: Any) -> str:
        if self.submitted:
            return OVER
        self.env.turn += 1
        if name == "verify":
            return self._verify()
        if name == "submit" and name in self.env.tools:
            pre = self._verify() + "\n" if self.env.unverified_changes() else ""
            self.submitted = True
            return f"{pre}submitted. {self.env.best_summary()}"
        return self.env.execute(name, arguments).output

    def _verify(self) -> str:
        from ..agent.tools.kernel import trim_verdict

        solution, fp, files, notes = self.env.prepare_candidate()
        text_files = {k: b.decode(errors="replace") for k, b in files.items()}
        result = self.evaluator.evaluate(self.task, text_files, self.config.reward_kind)
        v = result.verdict.to_dict()
        self.verdicts.append(v)
        note = self.env.record_verdict(v, fp, files, solution.path)
        return "\n".join([*notes, json.dumps(trim_verdict(v), indent=1), note])

    # ------------------------------------------------------------------ outcome
    def best_verdict(self) -> dict[str, Any] | None:
        return self.env.best.verdict if self.env.best else None

    def reward(self) -> float | None:
        return outcome_reward(self.best_verdict(), self.verdicts[-1] if self.verdicts else None,
                              self.config.reward_kind)

    def close(self) -> None:
        if not self.config.keep_workspaces:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def replace(cfg: SessionConfig, **kw) -> SessionConfig:
    return dataclasses.replace(cfg, **kw)
