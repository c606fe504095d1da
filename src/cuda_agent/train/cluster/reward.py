"""A verl ``custom_reward_function`` for single-turn rows (``custom_reward_function.path`` =
this file, ``name: compute_score``). Agentic rows carry their reward from the agent loop and
never reach it.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)``; the row's
``extra_info`` holds ``task_name`` and ``task_source``. The solution text is parsed like a
TRL completion and evaluated through the evaluation service (``CUDA_AGENT_EVAL_URL``), or in
process when that variable is unset.

verl wants a number for every row, and cannot leave one out as TRL does: a ``harness_error``
(reward None: the reference or the host failed, not the candidate) is evaluated once more, and if it
persists scores -1, today's figure for a failure, with ``harness_error: 1.0`` in the row's metrics.
"""

from __future__ import annotations

from typing import Any

from ...tasks import Task
from ..evaluator import evaluator_from_env
from ..solution_io import parse_completion


def compute_score(data_source: str, solution_str: str, ground_truth: Any = None, extra_info: dict | None = None,
                  **kwargs) -> dict[str, Any]:
    info = extra_info or {}
    task = Task(name=str(info.get("task_name") or "task"), source=info["task_source"])
    evaluator, files, kind = evaluator_from_env(), parse_completion(solution_str), info.get("reward_kind", "paper")
    result = evaluator.evaluate(task, files, kind)
    if result.reward is None:  # a harness error: once more, as bench does
        result = evaluator.evaluate(task, files, kind)
    return {"score": -1.0 if result.reward is None else result.reward, "pass": float(result.verdict.ok),
            "harness_error": float(result.reward is None),
            "speedup_vs_compile": result.verdict.speedup_vs_compile or 0.0}
