"""Stage 1, single-turn RL warm-up: prompt = task, completion = the whole solution, reward =
the sandbox's verdict. TRL ``GRPOTrainer`` (group-relative advantages; no critic), with the
paper's asymmetric clip (0.2 / 0.28).

    cuda-agent train single-turn --model Qwen/Qwen3-8B --tasks tasks.parquet --out runs/st \
        --eval-url http://evalhost:8420
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .common import (
    DEFAULT_ACTOR,
    GRPOSettings,
    OptimConfig,
    RunConfig,
    resume_checkpoint,
    save_config,
    training_arguments,
)
from .rewards import SandboxReward


@dataclass
class SandboxSettings:
    """How rollouts reach the sandbox."""

    eval_url: str | None = None
    """The evaluation service (``cuda-agent train serve``); None: the sandbox in this process
    (fine on CPU for compile errors and rejections; on one GPU it shares the GPU with training)."""
    precision: str = "fp32"
    rep_ms: float = 200.0
    device: int = 0
    """In-process only: the GPU that times kernels."""

    def evaluator(self):
        from ..sandbox import SandboxConfig
        from .evaluator import evaluator_for

        return evaluator_for(self.eval_url, SandboxConfig(precision=self.precision, rep_ms=self.rep_ms,
                                                          device=self.device))


class SingleTurnStage:
    @dataclass
    class Config(GRPOSettings):
        model: str = DEFAULT_ACTOR
        """Actor initialization (HF name or path)."""
        tasks: str = ""
        """Task source: a .py file, a directory of them, or a synth/Ops-6K .parquet/.jsonl."""
        max_tasks: int | None = None
        max_prompt_length: int | None = None
        max_completion_length: int = 8192
        reward: SandboxReward.Config = field(default_factory=SandboxReward.Config)
        sandbox: SandboxSettings = field(default_factory=SandboxSettings)
        optim: OptimConfig = field(default_factory=OptimConfig)
        run: RunConfig = field(default_factory=lambda: RunConfig(out="runs/single_turn"))

    def __init__(self, config: Config):
        self.config = config

    def run(self) -> Path:
        from datasets import Dataset
        from transformers import AutoTokenizer
        from trl import GRPOConfig, GRPOTrainer

        from .data import load_tasks, prompt_rows
        from .metrics import RunLog, trainer_callback

        cfg = self.config
        save_config(cfg, cfg.run.out)
        tasks = load_tasks(cfg.tasks, cfg.max_tasks)
        if not tasks:
            raise ValueError(f"{cfg.tasks}: no tasks")
        log = RunLog(cfg.run.out, tensorboard=cfg.run.tensorboard)
        if cfg.reward.log_path is None:
            cfg.reward.log_path = Path(cfg.run.out) / "rollouts.jsonl"
        reward = SandboxReward(cfg.reward, tasks, cfg.sandbox.evaluator())
        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        tokenizer.padding_side = "left"
        args = GRPOConfig(**training_arguments(cfg.optim, cfg.run), **cfg.grpo_arguments(),
                          max_completion_length=cfg.max_completion_length)
        trainer = GRPOTrainer(model=cfg.model, reward_funcs=[reward], args=args,
                              train_dataset=Dataset.from_list(prompt_rows(tasks)), processing_class=tokenizer,
                              callbacks=[trainer_callback(log, reward.stats)])
        trainer.train(resume_from_checkpoint=resume_checkpoint(cfg.run))
        from .common import finish

        return finish(trainer, cfg.run.out, log)
