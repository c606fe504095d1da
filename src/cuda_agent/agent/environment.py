"""The Environment: one task's workspace, its tools, and the best verified solution so far.

``execute(name, arguments)`` validates and runs one tool call and returns a ToolResult; it never
raises for anything the model did. ``verify`` judges through :meth:`Environment.evaluate`: the
sandbox in this process, or the ``verifier`` a driver passes (training: the evaluation service). The environment also keeps score: every verdict is recorded,
and a correct one faster than the best so far is copied to ``<run_dir>/best/``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sandbox import REWARDS, Solution, Verdict
from ..tasks import Task
from .config import AgentConfig
from .tools import Tool, ToolResult, load_tool, validate_args
from .workspace import Workspace


def evaluate(task: Task, solution: Solution, config) -> Verdict:
    """``sandbox.evaluate``, imported when a candidate is first judged: it brings torch, which a command
    that never judges (``cuda-agent --help``) should not wait for."""
    from ..sandbox import evaluate as sandbox_evaluate

    return sandbox_evaluate(task, solution, config)


@dataclass
class Best:
    verdict: dict[str, Any]
    fingerprint: str
    files: dict[str, str]
    turn: int
    path: Path

    @property
    def score(self) -> float:
        """The sandbox's ``speedup`` reward: -1 unless correct, else the speedup over torch.compile
        (over eager when the compile baseline is missing)."""
        return REWARDS["speedup"](Verdict.from_dict(self.verdict))

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "fingerprint": self.fingerprint, "files": self.files, "turn": self.turn,
                "speedup_vs_eager": self.verdict.get("speedup_vs_eager"),
                "speedup_vs_compile": self.verdict.get("speedup_vs_compile"), "reward": self.verdict.get("reward")}


@dataclass
class Environment:
    task: Task
    run_dir: Path
    config: AgentConfig
    verifier: Callable[[Task, Solution], Verdict] | None = None
    """Who judges a candidate for ``verify``: None is the sandbox in this process (``optimize``,
    ``bench --agent``); training passes the evaluation service (``train/agent_env.py``)."""
    workspace: Workspace = field(init=False)
    tools: dict[str, Tool] = field(init=False)
    best: Best | None = field(default=None, init=False)
    verified: dict[str, str] = field(default_factory=dict, init=False)
    """fingerprint -> verdict of every verified source state."""
    turn: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.run_dir = Path(self.run_dir).resolve()
        self.workspace = Workspace.create(self.run_dir / "workspace", self.task, self.config.target_speedup,
                                          self.config.sandbox.precision)
        self.candidates_dir = self.run_dir / "candidates"
        self.best_dir = self.run_dir / "best"
        self.tools = {name: load_tool(name) for name in self.config.tools}
        self.initial_fingerprint = Workspace.fingerprint(self.workspace.solution_files())

    # ------------------------------------------------------------------ tools
    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools.values()]

    def execute(self, name: str, arguments: Any) -> ToolResult:
        tool = self.tools.get(name)
        if tool is None:
            return ToolResult(f"unknown tool {name!r}; the tools are: {', '.join(self.tools)}", ok=False,
                              info={"invalid_call": True})
        args, error = validate_args(arguments, tool.parameters)
        if error:
            return ToolResult(f"{name}: {error}", ok=False, info={"invalid_call": True})
        return tool.run(args, self)

    # ------------------------------------------------------------------ sandbox plumbing
    def evaluate(self, solution: Solution) -> Verdict:
        """The verdict on a candidate snapshot, from the verifier or the in-process sandbox."""
        if self.verifier is not None:
            return self.verifier(self.task, solution)
        return evaluate(self.task, solution, self.config.sandbox)

    def prepare_candidate(self) -> tuple[Solution, str, dict[str, bytes], list[str]]:
        """Restore read-only files, snapshot the solution; returns (solution, fingerprint, files, notes)."""
        restored = self.workspace.restore_read_only()
        notes = [f"note: {name} had been changed; it is read-only and was restored from the original"
                 for name in restored]
        solution, fp, files = self.workspace.snapshot(self.candidates_dir)
        return solution, fp, files, notes

    def record_verdict(self, v: dict[str, Any], fingerprint: str, files: dict[str, bytes], path: Path) -> str:
        """Remember a verdict; keep the solution if it is the best so far. Returns a line for the agent."""
        self.verified[fingerprint] = v.get("verdict", "")
        score = REWARDS["speedup"](Verdict.from_dict(v))  # None: a harness_error, never a best
        if score is not None and score > (self.best.score if self.best else -1.0):
            self.best = Best(v, fingerprint, {k: b.decode(errors="replace") for k, b in files.items()}, self.turn,
                             self.best_dir)
            tmp = self.best_dir.with_name("best.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(path, tmp, ignore=shutil.ignore_patterns("__pycache__"))
            (tmp / "verdict.json").write_text(json.dumps(v, indent=1))
            shutil.rmtree(self.best_dir, ignore_errors=True)
            tmp.rename(self.best_dir)
            return f"new best: {self.best_summary()}"
        return self.best_summary()

    def best_summary(self) -> str:
        target = self.config.target_speedup
        goal = f"; target: speedup_vs_compile > {target:.2f}" if target else ""
        if self.best is None:
            return f"no correct solution yet{goal}"
        v = self.best.verdict
        return (f"best so far (turn {self.best.turn}): {_x(v.get('speedup_vs_eager'))} vs eager, "
                f"{_x(v.get('speedup_vs_compile'))} vs torch.compile{goal}")

    def target_reached(self) -> bool:
        target = self.config.target_speedup
        if target is None or self.best is None:
            return False
        s = self.best.verdict.get("speedup_vs_compile")
        return s is not None and s > target

    def unverified_changes(self) -> bool:
        fp = Workspace.fingerprint(self.workspace.solution_files())
        return fp != self.initial_fingerprint and fp not in self.verified


def _x(s: float | None) -> str:
    return "-" if s is None else f"{s:.2f}x"


__all__ = ["Environment", "Best"]
