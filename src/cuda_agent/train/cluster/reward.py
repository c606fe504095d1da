"""A verl ``custom_reward_function`` for single-turn rows (``custom_reward_function.path`` =
this file, ``name: compute_score``). Agentic rows carry their reward from the agent loop and
never reach it.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)``; the row's
``extra_info`` holds ``task_name`` and ``task_source``. The solution text is parsed like a
TRL completion and evaluated through the evaluation service (``CUDA_AGENT_EVAL_URL``), or in
process when that variable is unset.
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
    result = evaluator_from_env().evaluate(task, parse_completion(solution_str), info.get("reward_kind", "paper"))
    return {"score": result.reward, "pass": float(result.verdict.ok),
            "speedup_vs_compile": result.verdict.speedup_vs_compile or 0.0}
