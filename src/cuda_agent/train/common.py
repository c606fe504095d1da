"""What every stage shares: the default actor, the run directory, resume, the final save.

A stage's settings are two dataclasses, its own ``Config`` and TRL's arguments class, resolved
by :mod:`cuda_agent.train.config` (defaults, preset, YAML, ``--set``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ACTOR = "Qwen/Qwen3-8B"
"""Default actor (and critic) initialization for real runs; any HF causal LM path or name."""


@dataclass
class RunSettings:
    """Fields of every stage's own ``Config``: how it treats its run directory (``output_dir``,
    a trainer argument)."""

    resume: bool = True
    """Resume from the newest ``checkpoint-*`` in ``output_dir`` when there is one."""
    tensorboard: bool = True
    """Our run log also writes TensorBoard events to ``<output_dir>/tb`` (when installed). The
    trainer's own reporting is ``report_to``."""


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def is_main_process() -> bool:
    """Rank 0 of an ``accelerate launch`` / torchrun job, or a single process: the one that writes
    the run directory's own files (the trainer saves its checkpoints itself)."""
    return int(os.environ.get("RANK", "0")) == 0


def resume_checkpoint(config: RunSettings, trainer_args: Any) -> str | None:
    """The newest complete checkpoint to resume from, or None (fresh run or resume off).

    Complete: it has ``trainer_state.json``, which the Trainer writes last. A run killed while
    saving leaves a ``checkpoint-N`` without it, and transformers' ``get_last_checkpoint`` would
    pick that one (its step number is the highest) and fail to load it."""
    out = Path(trainer_args.output_dir)
    if not config.resume or not out.is_dir():
        return None
    done = [d for d in out.glob("checkpoint-*") if d.name.rpartition("-")[2].isdigit()
            and (d / "trainer_state.json").is_file()]
    return str(max(done, key=lambda d: int(d.name.rpartition("-")[2]))) if done else None


def save_config(config: Any, trainer_args: Any) -> None:
    """``<output_dir>/config.json``: the stage's Config and the trainer's arguments, as run."""
    if not is_main_process():
        return
    from .config import resolved

    out = Path(trainer_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(resolved(config, trainer_args), indent=2, default=str) + "\n")


def run_log(config: RunSettings, trainer_args: Any):
    """The stage's :class:`~cuda_agent.train.metrics.RunLog` in ``output_dir``."""
    from .metrics import RunLog

    return RunLog(trainer_args.output_dir, tensorboard=config.tensorboard and is_main_process())


def finish(trainer, log) -> Path:
    """Save the final model + tokenizer to ``<output_dir>/final`` and close the run log."""
    final = Path(trainer.args.output_dir) / "final"
    trainer.save_model(str(final))
    tok = getattr(trainer, "processing_class", None)
    if tok is not None and trainer.is_world_process_zero():
        tok.save_pretrained(str(final))
    if trainer.is_world_process_zero():
        log.close()
    return final
