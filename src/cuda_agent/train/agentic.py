"""Stage 4 on one node: multi-turn agentic RL with TRL's ``GRPOTrainer`` and our tools.

TRL (>= 1.x) runs the tool-calling loop itself when given an ``environment_factory``: each
rollout gets an environment instance whose public methods are the tools (schemas from their
signatures and docstrings), ``reset(**row)`` starts the episode, and ``get_reward()`` scores
it. :func:`environment_class` builds that class from the agent's tool schemas, so the model
sees exactly the tools it sees in ``cuda-agent optimize``; each method forwards to an
:class:`~cuda_agent.train.agent_env.AgentSession` (verify through the evaluation service).

What this is not: the paper's PPO with a critic. TRL has no PPO-with-critic trainer for
multi-turn tool use; GRPO (group-relative advantages, no value model) is what runs here. The
paper's recipe (GAE gamma=1 lambda=0.95 with the pretrained critic) runs on verl:
:mod:`cuda_agent.train.cluster`, ``configs/verl/ppo_agentic.yaml``.

Tool output is masked from the loss by TRL (its ``tool_mask``); the sequence budget is
``max_completion_length`` tokens over all turns and ``max_tool_calling_iterations`` rounds.
"""

from __future__ import annotations

import json
import keyword
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .agent_env import REPLY_LOG_CHARS, AgentSession, SessionConfig, initial_messages, tool_schemas
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

_PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "object": "dict",
             "array": "list"}


def _method_source(schema: dict[str, Any]) -> str:
    """Python source of one tool method whose signature and Google docstring reproduce ``schema``."""
    fn = schema.get("function") or schema
    name, params = fn["name"], fn.get("parameters") or {}
    props, required = params.get("properties") or {}, set(params.get("required") or [])
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"tool name {name!r} is not a Python identifier")
    args, doc_args, names = ["self"], [], []
    for key in sorted(props, key=lambda k: k not in required):
        if not key.isidentifier() or keyword.iskeyword(key):
            raise ValueError(f"argument {key!r} of tool {name!r} is not a Python identifier")
        typ = _PY_TYPES.get(props[key].get("type"), "str")
        # `typ = None`, not `typ | None`: TRL renders the schema from this signature, and an Optional hint
        # would add "nullable" that the agent's own schema (what RFT data shows) does not have
        args.append(f"{key}: {typ}" if key in required else f"{key}: {typ} = None")
        desc = " ".join(str(props[key].get("description") or key).split())
        doc_args.append(f"            {key}: {desc}")
        names.append(key)
    description = " ".join(str(fn.get("description") or name).split()).replace('"""', "'''")
    doc = f'"""{description}\n\n'
    doc += ("        Args:\n" + "\n".join(doc_args) + "\n") if doc_args else ""
    doc += '        """'  # no Returns section and no return annotation: no "return" key in the rendered schema
    call_args = "{" + ", ".join(f"{k!r}: {k}" for k in names) + "}"
    return (f"    def {name}({', '.join(args)}):\n        {doc}\n"
            f"        return self._call({name!r}, {{k: v for k, v in {call_args}.items() if v is not None}})\n")


def environment_class(schemas: list[dict[str, Any]], session_factory) -> type:
    """A TRL environment class: one method per tool schema, plus ``reset`` and ``get_reward``.
    ``session_factory(row) -> AgentSession`` starts an episode from a dataset row."""
    src = "class CudaAgentEnv(_Base):\n" + "\n".join(_method_source(s) for s in schemas)
    namespace: dict[str, Any] = {"_Base": _EnvBase}
    exec(compile(src, "<cuda_agent.train.agentic tools>", "exec"), namespace)  # our own generated code
    cls = namespace["CudaAgentEnv"]
    cls._session_factory = staticmethod(session_factory)
    return cls


class _EnvBase:
    """What every generated environment shares; the tool methods are added per schema."""

    _session_factory = None

    def __init__(self) -> None:
        self.session: AgentSession | None = None
        self.final_reward: float | None = None
        self.scored = False

    def reset(self, **row: Any) -> None:
        if self.session is not None:
            self.session.close()
        self.session = type(self)._session_factory(row)
        self.final_reward, self.scored = None, False
        return None  # the prompt row already holds the agent's task message

    def get_reward(self) -> float | None:
        """The episode's reward; None after a harness_error (TRL leaves the rollout out: every reward
        function returns None for it, see :mod:`.rewards`)."""
        if self.session is None:
            return -1.0
        if not self.scored:
            self.final_reward, self.scored = self.session.reward(), True
            self.session.close()
        return self.final_reward

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        return self.session.execute(name, arguments)


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
        sessions: list[AgentSession] = []

        def new_session(row: dict[str, Any]) -> AgentSession:
            s = AgentSession(tasks[row["task_name"]], cfg.session, evaluator)
            sessions.append(s)
            return s

        env_cls = environment_class(tool_schemas(cfg.session), new_session)
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
            done = [s for s in sessions if s.submitted or s.verdicts]
            scores = [s.reward() for s in sessions]
            rewards = [r for r in scores if r is not None]  # harness errors: left out, counted
            with open(rollouts, "a") as f:
                for i, s in enumerate(sessions):
                    f.write(json.dumps({"task": s.task.name, "reward": scores[i], "submitted": s.submitted,
                                        "calls": s.calls, "last_message": _last_text(completions, i)}) + "\n")
            if scores:
                stats["harness_error_rate"] = sum(r is None for r in scores) / len(scores)
            if rewards:
                from .rlmath import reward_distribution

                stats.update(sandbox_reward_mean=sum(rewards) / len(rewards),
                             pass_rate=sum(r > 0 for r in rewards) / len(scores),
                             submit_rate=sum(s.submitted for s in sessions) / len(sessions),
                             verified_rate=len(done) / len(sessions), **reward_distribution(rewards))
            sessions.clear()
            return [None] * len(completions)

        trainer = GRPOTrainer(model=cfg.model, reward_funcs=[episode_stats], args=args,
                              train_dataset=Dataset.from_list(self.rows(tasks.values())), processing_class=tokenizer,
                              environment_factory=env_cls, callbacks=[trainer_callback(log, stats)])
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
