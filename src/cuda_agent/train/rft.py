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
from dataclasses import dataclass
from pathlib import Path

from .cleaning import CleanConfig
from .common import DEFAULT_ACTOR, RunSettings, finish, is_main_process, resume_checkpoint, run_log, save_config


class RFTStage:
    TRAINER = "trl:SFTConfig"
    DEFAULTS = dict(learning_rate=1e-5, max_steps=200, per_device_train_batch_size=1, gradient_accumulation_steps=32,
                    max_length=131072, assistant_only_loss=True, packing=False, output_dir="runs/rft")
    """Loss on the assistant's turns only, one conversation per row; ``max_length`` is the
    paper's 131k context (longer conversations are truncated)."""

    @dataclass
    class Config(RunSettings):
        model: str = DEFAULT_ACTOR
        """Actor to fine-tune (the single-turn stage's ``final/``)."""
        trajectories: str = ""
        """A trajectory JSONL file or a directory of them (agent runs)."""
        min_reward: float = 1.0
        """Keep episodes whose reward is at least this (paper: positive reward)."""
        require_submit: bool = False
        """Keep only episodes that ended with a ``submit`` call."""
        truncate_after_submit: bool = True
        """Cleaning rules (:mod:`.cleaning`), each on by default."""
        drop_invalid: bool = True
        dedupe: bool = True
        strip_hallucinated: bool = True

        def clean(self) -> CleanConfig:
            return CleanConfig(truncate_after_submit=self.truncate_after_submit, drop_invalid=self.drop_invalid,
                               dedupe=self.dedupe, strip_hallucinated=self.strip_hallucinated)

    def __init__(self, config: Config, args):
        self.config, self.args = config, args

    def dataset_rows(self) -> list[dict]:
        from .data import sft_rows
        from .trajectories import read_episodes, select_for_rft

        cfg = self.config
        kept, stats = select_for_rft(read_episodes(cfg.trajectories), cfg.min_reward, cfg.clean(), cfg.require_submit)
        out = Path(self.args.output_dir)
        if is_main_process():
            out.mkdir(parents=True, exist_ok=True)
            (out / "cleaning.json").write_text(json.dumps({"kept": len(kept), **vars(stats)}, indent=2))
        return sft_rows(kept)

    def build_trainer(self, log):
        """The configured ``SFTTrainer`` (its ``train_dataset`` holds ``assistant_masks``)."""
        from transformers import AutoTokenizer
        from trl import SFTTrainer

        from .data import conversation_dataset
        from .metrics import trainer_callback

        cfg = self.config
        rows = self.dataset_rows()
        if not rows:
            raise ValueError(f"{cfg.trajectories}: no episode with reward >= {cfg.min_reward}")
        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        return SFTTrainer(model=cfg.model, args=self.args, train_dataset=conversation_dataset(rows),
                          processing_class=tokenizer, callbacks=[trainer_callback(log, {"rft_episodes": len(rows)})])

    def run(self) -> Path:
        cfg, args = self.config, self.args
        save_config(cfg, args)
        log = run_log(cfg, args)
        trainer = self.build_trainer(log)
        trainer.train(resume_from_checkpoint=resume_checkpoint(cfg, args))
        return finish(trainer, log)
