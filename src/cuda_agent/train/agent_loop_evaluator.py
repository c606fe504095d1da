"""The evaluator a process gets from its environment: ``CUDA_AGENT_EVAL_URL`` -> the service."""

from __future__ import annotations

import os


def evaluator_from_env():
    url = os.environ.get("CUDA_AGENT_EVAL_URL")
    if url:
        from .client import EvalClient

        return EvalClient(url)
    from .evaluator import LocalEvaluator

    return LocalEvaluator()
