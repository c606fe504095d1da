"""Evaluators: (Task, solution files) -> EvalResult, in this process or through the service.

Training never times kernels on its own GPUs: rollouts call an :class:`Evaluator`, which is
either :class:`LocalEvaluator` (the sandbox in this process, for one-GPU runs and CPU tests) or
:class:`cuda_agent.train.client.EvalClient` (the evaluation service on GPUs reserved for
timing). Both return the same record.

Errors: a candidate's failure is a Verdict (compile_error, rejected, ...). A host that cannot
evaluate at all (no GPU: :class:`~cuda_agent.sandbox.NoGpuError`; service unreachable after
retries: :class:`~cuda_agent.train.client.EvalUnavailable`) raises: it says nothing about the
candidate, so it must not become a reward. Nor does a ``harness_error`` verdict (the reference
crashed, a worker was killed from outside, the harness raised): its reward is None, and the stages
leave such a sample out of the batch (:mod:`.rewards`, :mod:`.agentic`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from typing import Protocol

from ..sandbox.config import SandboxConfig
from ..sandbox.reward import reward  # the function (the package attribute can be the module)
from ..sandbox.verdict import Verdict
from ..tasks import Task
from .solution_io import write_solution

FORMAT_ERROR = "format_error"


@dataclass
class EvalResult:
    """One evaluation. Defaults mean failed."""

    verdict: Verdict = field(default_factory=Verdict)
    reward: float | None = -1.0
    """``REWARDS[reward_kind](verdict)``; None for a ``harness_error`` (left out of training batches)."""
    gpu: int | None = None
    """The GPU index it was timed on (service), if any."""
    queue_s: float = 0.0
    """Seconds spent waiting for a GPU worker (service)."""


class Evaluator(Protocol):
    def evaluate(self, task: Task, files: dict[str, str], reward_kind: str = "paper") -> EvalResult: ...


def no_solution_verdict(task: Task) -> Verdict:
    """The verdict of a completion that holds no solution at all (a format failure)."""
    v = Verdict(verdict="rejected", task=task.name, solution=None)
    v.reject("the completion holds no solution: expected `### model_new.py` with a fenced block "
             "(plus `### kernels/<name>.cu` ...) or one ```python block defining ModelNew", FORMAT_ERROR)
    return v


@dataclass
class LocalEvaluator:
    """The sandbox in this process. ``sandbox`` carries precision, timing budget, device."""

    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def evaluate(self, task: Task, files: dict[str, str], reward_kind: str = "paper") -> EvalResult:
        from ..sandbox import evaluate  # torch: imported on first use, so the service's HTTP side stays light

        if not files:
            v = no_solution_verdict(task)
            return EvalResult(verdict=v, reward=reward(v, reward_kind))
        with tempfile.TemporaryDirectory(prefix="cuda_agent_sol_") as tmp:
            v = evaluate(task, write_solution(files, tmp), self.sandbox)
        return EvalResult(verdict=v, reward=reward(v, reward_kind), gpu=self.sandbox.device)


def evaluator_for(url: str | None, sandbox: SandboxConfig | None = None) -> Evaluator:
    """The service at ``url`` (with retries), or the in-process sandbox when ``url`` is empty."""
    if url:
        from .client import EvalClient

        return EvalClient(url)
    return LocalEvaluator(sandbox or SandboxConfig())


def evaluator_from_env() -> Evaluator:
    """``CUDA_AGENT_EVAL_URL`` -> the service; unset: the in-process sandbox (verl reward workers)."""
    import os

    return evaluator_for(os.environ.get("CUDA_AGENT_EVAL_URL"))
