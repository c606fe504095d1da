"""Named presets: small functions that start from a stage's default Config.

``paper`` is the default Config of each stage (the paper's numbers where it gives them:
clip 0.2/0.28, actor lr 3e-6, critic lr 6e-6, 150 steps, 150 turns, 131k context, 1024
sequences per step on 8 GPUs: per_device 8 x grad_accum 16 x 8). ``smoke`` shrinks every
stage to a few CPU-sized steps (tests, ``benchmarks/train_smoke.py``).
"""

from __future__ import annotations

import importlib

from . import STAGES
from .common import OptimConfig


def stage_class(name: str):
    module, cls = STAGES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def paper(stage: str):
    return stage_class(stage).Config()


def smoke(stage: str):
    """A handful of steps, tiny batches and lengths: the plumbing, not the numbers."""
    cfg = stage_class(stage).Config()
    cfg.optim = OptimConfig(lr=1e-4, max_steps=2, per_device_batch=2, grad_accum=1, save_steps=1, bf16=False)
    if stage == "single-turn":
        cfg.num_generations, cfg.max_completion_length, cfg.reward.max_parallel = 2, 64, 2
    elif stage == "agentic":
        cfg.num_generations, cfg.max_completion_length, cfg.max_tool_calling_iterations = 2, 96, 3
        cfg.session.max_turns = 3
    elif stage in ("rft", "value"):
        cfg.max_length = 4096
        cfg.optim.per_device_batch = 1
    return cfg


PRESETS = {"paper": paper, "smoke": smoke}
