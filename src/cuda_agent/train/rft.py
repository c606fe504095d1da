"""Stage 2, rejection fine-tuning: keep agent trajectories with a positive reward, clean them
(:mod:`cuda_agent.train.cleaning`), and SFT the actor on them with TRL's ``SFTTrainer``.

The loss is on the assistant's turns only (``assistant_only_loss=True``): tool output, the
task and the system prompt are context, never targets. TRL renders each row with its
``tools`` and swaps in the training variant of the chat template (``{% generation %}``
markers) for known templates (Qwen2.5/3, Llama 3, ...); see docs/train.md.

    cuda-agent train rft --model runs/single_turn/final --trajectories runs/agent/ --out runs/rft
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .cleaning import CleanConfig
from .common import DEFAULT_ACTOR, OptimConfig, RunConfig, finish, resume_checkpoint, save_config, training_arguments


class RFTStage:
    @dataclass
    class Config:
        model: str = DEFAULT_ACTOR
        """Actor to fine-tune (the single-turn stage's ``final/``)."""
        trajectories: str = ""
        """A trajectory JSONL file or a directory of them (agent runs)."""
        min_reward: float = 1.0
        """Keep episodes whose reward is at least this (paper: positive reward)."""
        require_submit: bool = False
        """Keep only episodes that ended with a ``submit`` call."""
        max_length: int = 131072
        """Token limit per conversation (paper: 131k context); longer ones are truncated."""
        clean: CleanConfig = field(default_factory=CleanConfig)
        optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5, max_steps=200, per_device_batch=1,
                                                                       grad_accum=32))
        run: RunConfig = field(default_factory=lambda: RunConfig(out="runs/rft"))

    def __init__(self, config: Config):
        self.config = config

    def dataset_rows(self) -> list[dict]:
        from .data import sft_rows
        from .trajectories import read_episodes, select_for_rft

        cfg = self.config
        kept, stats = select_for_rft(read_episodes(cfg.trajectories), cfg.min_reward, cfg.clean, cfg.require_submit)
        Path(cfg.run.out).mkdir(parents=True, exist_ok=True)
        (Path(cfg.run.out) / "cleaning.json").write_text(json.dumps({"kept": len(kept), **vars(stats)}, indent=2))
        return sft_rows(kept)

    def build_trainer(self, log):
        """The configured ``SFTTrainer`` (its ``train_dataset`` holds ``assistant_masks``)."""
        from transformers import AutoTokenizer
        from trl import SFTConfig, SFTTrainer

        from .data import conversation_dataset
        from .metrics import trainer_callback

        cfg = self.config
        rows = self.dataset_rows()
        if not rows:
            raise ValueError(f"{cfg.trajectories}: no episode with reward >= {cfg.min_reward}")
        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        args = SFTConfig(**training_arguments(cfg.optim, cfg.run), assistant_only_loss=True,
                         max_length=cfg.max_length, packing=False)
        return SFTTrainer(model=cfg.model, args=args, train_dataset=conversation_dataset(rows),
                          processing_class=tokenizer, callbacks=[trainer_callback(log, {"rft_episodes": len(rows)})])

    def run(self) -> Path:
        from .metrics import RunLog

        cfg = self.config
        save_config(cfg, cfg.run.out)
        log = RunLog(cfg.run.out, tensorboard=cfg.run.tensorboard)
        trainer = self.build_trainer(log)
        trainer.train(resume_from_checkpoint=resume_checkpoint(cfg.run))
        return finish(trainer, cfg.run.out, log)
