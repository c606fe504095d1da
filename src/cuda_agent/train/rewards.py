"""The sandbox as a TRL reward function: completion -> solution files -> Verdict -> reward.

    reward = SandboxReward(SandboxReward.Config(kind="paper"), tasks, LocalEvaluator())
    GRPOTrainer(..., reward_funcs=[reward])

TRL calls it with the batch's prompts, completions and dataset columns (our prompt rows carry
``task_name``). Completions are evaluated in parallel threads (the sandbox runs its work in
subprocesses; the evaluation service queues them on its GPUs). Every verdict is appended to
``<run_dir>/rollouts.jsonl``, and batch statistics (reward mean, distribution, pass rate,
verdict mix) are handed to the run log through ``stats``.

A ``harness_error`` verdict (the reference crashed, a worker was killed from outside, the harness
raised) has reward None, and None is what this function returns for that completion: TRL (>= 1.16,
``GRPOTrainer._generate_and_score_completions``) marks a completion whose every reward is None
"unscorable": it is left out of its group's mean and std and its advantage is 0, so it moves the
policy neither way. It is never turned into a number. ``harness_error_rate`` in the batch statistics
counts them (a policy that learned to crash like the harness would show there, and earns no reward
by it).
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sandbox.reward import REWARDS
from ..tasks import Task
from .evaluator import EvalResult, Evaluator, LocalEvaluator
from .rlmath import reward_distribution
from .solution_io import parse_completion


def completion_text(completion: Any) -> str:
    """TRL hands a string (standard format) or a message list (conversational)."""
    if isinstance(completion, str):
        return completion
    return "\n".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")


def batch_stats(results: list[EvalResult]) -> dict[str, float]:
    """Reward mean, distribution, pass rate and verdict mix of one batch."""
    if not results:
        return {}
    rewards = [r.reward for r in results if r.reward is not None]  # harness errors are not rewards
    out = {"pass_rate": sum(r.verdict.ok for r in results) / len(results),
           "harness_error_rate": sum(r.reward is None for r in results) / len(results),
           **reward_distribution(rewards)}
    if rewards:
        out["sandbox_reward_mean"] = sum(rewards) / len(rewards)
    for r in results:
        key = f"verdict_{r.verdict.verdict}"
        out[key] = out.get(key, 0.0) + 1.0 / len(results)
    return out


class SandboxReward:
    """A TRL reward function (``__name__`` is what TRL logs it under)."""

    @dataclass
    class Config:
        kind: str = "paper"
        """Key of ``sandbox.REWARDS``: 'paper' (r in {-1,1,2,3}), 'speedup', 'log_speedup'."""
        max_parallel: int = 16
        """Completions evaluated at once (the service queues beyond its GPUs)."""
        log_path: Path | None = None
        """Append one JSON line per evaluated completion here (rollouts.jsonl)."""

    def __init__(self, config: Config, tasks: dict[str, Task] | list[Task], evaluator: Evaluator | None = None):
        if config.kind not in REWARDS:
            raise ValueError(f"reward kind must be one of {sorted(REWARDS)}")
        self.config = config
        self.tasks = tasks if isinstance(tasks, dict) else {t.name: t for t in tasks}
        self.evaluator = evaluator or LocalEvaluator()
        self.stats: dict[str, float] = {}
        """Statistics of the latest batch, merged into the next log row, then cleared."""
        self.__name__ = f"sandbox_{config.kind}"
        self._lock = threading.Lock()

    def __call__(self, prompts=None, completions=None, task_name=None, trainer_state=None, **_: Any) -> list[float | None]:
        """One reward per completion; None for a harness_error (TRL leaves that sample out)."""
        texts = [completion_text(c) for c in completions]
        names = list(task_name)
        with ThreadPoolExecutor(max_workers=max(1, min(self.config.max_parallel, len(texts)))) as pool:
            results = list(pool.map(self._one, names, texts))
        step = getattr(trainer_state, "global_step", None)
        self._record(step, names, texts, results)
        return [r.reward for r in results]

    def evaluate_text(self, name: str, text: str) -> EvalResult:
        return self._one(name, text)

    def _one(self, name: str, text: str) -> EvalResult:
        task = self.tasks[name]
        return self.evaluator.evaluate(task, parse_completion(text), self.config.kind)

    def _record(self, step, names, texts, results) -> None:
        with self._lock:
            self.stats.clear()
            self.stats.update(batch_stats(results))
            if self.config.log_path is None:
                return
            self.config.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.config.log_path, "a") as f:
                for name, text, r in zip(names, texts, results):
                    f.write(json.dumps({"time": time.time(), "step": step, "task": name, "reward": r.reward,
                                        "verdict": r.verdict.verdict, "reasons": r.verdict.reasons[:3],
                                        "speedup_vs_compile": r.verdict.speedup_vs_compile,
                                        "completion_chars": len(text)}) + "\n")
