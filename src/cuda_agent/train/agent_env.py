"""Training episodes: the agent's own :class:`~cuda_agent.agent.Episode`, verified through an Evaluator.

Nothing here re-implements the loop. A training episode differs from ``cuda-agent optimize`` in
its settings (:class:`SessionConfig`: the training tool set, no early stop at 1.05, the reward
kind) and in who judges ``verify``: the :class:`~cuda_agent.train.evaluator.Evaluator` (the
evaluation service on a cluster, the in-process sandbox on one node), passed to the agent's
Environment as its ``verifier``. ``profile`` needs a GPU and is left out of the training tools.

Drivers: TRL's environment (:mod:`.agentic`, one tool call at a time), verl's agent loop
(:mod:`.cluster.episode`, token ids in and out) and the policy evaluations (:mod:`.demo`).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..tasks import Task
from .evaluator import Evaluator, LocalEvaluator
from .solution_io import read_files

TRAINING_TOOLS = ("bash", "compile", "edit_file", "glob", "grep", "read_file", "submit", "verify", "write_file")
"""In name order: TRL lists an environment's tool methods by name, so the prompts of recorded
trajectories (RFT data) and of TRL's agentic rollouts show the tools in the same order."""
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

    return AgentConfig(max_turns=cfg.max_turns, target_speedup=cfg.target_speedup, tools=tuple(cfg.tools),
                       reward_kind=cfg.reward_kind)


def initial_messages(task: Task, cfg: SessionConfig) -> list[dict[str, Any]]:
    """The agent's system and task messages for these settings."""
    from ..agent import initial_messages

    return initial_messages(task, agent_config(cfg))


def tool_schemas(cfg: SessionConfig) -> list[dict[str, Any]]:
    from ..agent.tools import load_tool

    return [load_tool(name).schema() for name in cfg.tools]


def evaluator_verifier(evaluator: Evaluator, reward_kind: str = "paper"):
    """``verify`` through ``evaluator``: the candidate snapshot's files go to it, its Verdict comes back."""
    return lambda task, solution: evaluator.evaluate(task, read_files(solution.path), reward_kind).verdict


def start_episode(task: Task, cfg: SessionConfig | None = None, evaluator: Evaluator | None = None,
                  model_name: str = "policy"):
    """A fresh workspace under ``cfg.run_root`` and the agent's Episode on it."""
    from ..agent import Environment, Episode

    cfg = cfg or SessionConfig()
    root = Path(cfg.run_root) if cfg.run_root else None
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{task.name}_", dir=root))
    config = agent_config(cfg)
    env = Environment(task, run_dir, config, verifier=evaluator_verifier(evaluator or LocalEvaluator(),
                                                                         cfg.reward_kind))
    return Episode(env, config, model_name, save_turns=False)  # thousands per step: no per-turn episode.json


def close_episode(episode, cfg: SessionConfig) -> None:
    if not cfg.keep_workspaces:
        shutil.rmtree(episode.env.run_dir, ignore_errors=True)


def call_log(episode) -> list[dict[str, str]]:
    """Each tool call of an episode with the start of its result (for rollout logs)."""
    return [{"tool": m.get("name", ""), "reply": (m.get("content") or "")[:REPLY_LOG_CHARS]}
            for m in episode.messages if m.get("role") == "tool"]
