"""Named presets: small functions that give, per stage, the values laid over the stage's defaults.

Each preset maps a stage name (``single-turn``, ``rft``, ``value``, ``agentic``, or ``recipe`` for
:class:`~cuda_agent.train.recipe.RecipeConfig`) to a dict of keys of the stage's ``Config`` and
its trainer arguments (:mod:`cuda_agent.train.config` resolves them; ``--set`` and ``--config``
go on top).

* ``paper``: nothing over the stage defaults, which are the paper's numbers (clip 0.2/0.28, actor lr
  3e-6, critic lr 6e-6, 150 steps, 150 turns, 131k context, 1024 sequences per step on 8 GPUs:
  per_device 8 x grad_accum 16 x 8).
* ``smoke``: the "it learns" demo on one GPU with a tiny model (<= 10 min on an H200;
  benchmarks/RESULTS.md, Train). These numbers are the ones measured there: 400 RFT steps at lr 2e-3
  make the tiny model reproduce the honest episodes; agentic sampling at temperature 0.85.
* ``cpu``: ``smoke`` shrunk to a CPU-sized plumbing check (tests, ``benchmarks/train_smoke.py
  --allow-cpu``): a 2-layer 64-wide model, a step or two per stage. ``verify`` has no GPU there, so
  every reward is -1 and RFT keeps every episode (``min_reward`` -1).
"""

from __future__ import annotations

import importlib
from typing import Any

from . import STAGES


def stage_class(name: str):
    if name not in STAGES:
        raise KeyError(f"unknown stage {name!r}: expected one of {', '.join(STAGES)}")
    module, cls = STAGES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def paper(stage: str) -> dict[str, Any]:
    """The stage defaults as they are; the recipe starts from the 8B actor and skips the evaluations
    (the agent's local transformers backend is not how an 8B policy is evaluated: use ``cuda-agent bench``)."""
    if stage == "recipe":
        from .common import DEFAULT_ACTOR

        return dict(model=DEFAULT_ACTOR, evaluate=False)
    return {}


_ONE_GPU = dict(gradient_accumulation_steps=1, gradient_checkpointing=False, save_total_limit=2)

SMOKE: dict[str, dict[str, Any]] = {
    "single-turn": dict(_ONE_GPU, learning_rate=1e-5, max_steps=2, per_device_train_batch_size=4, save_steps=1,
                        num_generations=4, max_completion_length=256, reward_max_parallel=4),
    "rft": dict(_ONE_GPU, learning_rate=2e-3, max_steps=400, per_device_train_batch_size=4, save_steps=100,
                warmup_steps=10, lr_scheduler_type="cosine", logging_steps=10, bf16=False, max_length=16384),
    "value": dict(_ONE_GPU, learning_rate=1e-4, max_steps=40, per_device_train_batch_size=4, save_steps=20,
                  max_length=16384),
    "agentic": dict(_ONE_GPU, learning_rate=1e-6, max_steps=2, per_device_train_batch_size=4, save_steps=1,
                    bf16=False, num_generations=4, temperature=0.85, max_completion_length=12288,
                    max_tool_calling_iterations=10, max_turns=10),
    "recipe": dict(demo_tasks=4, tiny_hidden_size=256, tiny_layers=4, tiny_intermediate_size=768, evaluate=True,
                   serve=True),
}
"""The demo's settings, as measured on one H200 (benchmarks/RESULTS.md, Train, 2026-12-03 (B), run 4)."""

CPU: dict[str, dict[str, Any]] = {
    "single-turn": dict(max_steps=2, per_device_train_batch_size=2, num_generations=2, max_completion_length=16,
                        reward_max_parallel=2),
    "rft": dict(min_reward=-1.0, learning_rate=1e-3, max_steps=2, per_device_train_batch_size=1, save_steps=1,
                warmup_steps=0, logging_steps=1, max_length=6144),
    "value": dict(learning_rate=1e-3, max_steps=2, per_device_train_batch_size=2, save_steps=1, max_length=4096),
    "agentic": dict(max_steps=1, per_device_train_batch_size=2, num_generations=2, max_completion_length=24,
                    max_tool_calling_iterations=1, max_turns=3),
    "recipe": dict(demo_tasks=1, tiny_hidden_size=64, tiny_layers=2, tiny_intermediate_size=128,
                   eval_max_turns=2, eval_max_new_tokens=16, eval_before_rft_max_new_tokens=16),
}
"""Over :data:`SMOKE`: what a 2-core CPU runs in a minute or two."""


def smoke(stage: str) -> dict[str, Any]:
    """A handful of steps, tiny batches and lengths: the plumbing and the "it learns" demo."""
    return dict(SMOKE[stage])


def cpu(stage: str) -> dict[str, Any]:
    return {**SMOKE[stage], **CPU[stage]}


PRESETS = {"paper": paper, "smoke": smoke, "cpu": cpu}
