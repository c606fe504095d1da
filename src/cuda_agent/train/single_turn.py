"""Stage 1, single-turn RL warm-up: prompt = task, completion = the whole solution, reward =
the sandbox's verdict. TRL ``GRPOTrainer`` (group-relative advantages; no critic), with the
paper's asymmetric clip (0.2 / 0.28).

    cuda-agent train single-turn --model Qwen/Qwen3-8B --tasks tasks.parquet --out runs/st \
        --eval-url http://evalhost:8420
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .common import DEFAULT_ACTOR, RunSettings, finish, resume_checkpoint, run_log, save_config
from .rewards import SandboxReward

GRPO_DEFAULTS = dict(num_generations=8, temperature=1.0, epsilon=0.2, epsilon_high=0.28, beta=0.0, loss_type="dapo",
                     learning_rate=3e-6, max_steps=150, per_device_train_batch_size=8, gradient_accumulation_steps=16)
"""The paper's GRPO/PPO numbers, shared by both GRPO stages (single-turn and agentic): asymmetric clip
0.2 / 0.28, no KL term (``beta`` 0: no reference model is loaded), token-mean loss (TRL's ``dapo``,
as verl's ``token-mean``), actor lr 3e-6, 150 steps, 1024 sequences per step on 8 GPUs
(8 per device x 16 accumulation x 8). ``use_vllm`` / ``vllm_mode`` are TRL's, off by default."""


@dataclass
class SandboxSettings:
    """How rollouts reach the sandbox."""

    eval_url: str | None = None
    """The evaluation service (``cuda-agent train serve``); None: the sandbox in this process
    (fine on CPU for compile errors and rejections; on one GPU it shares the GPU with training)."""
    precision: str = "fp32"
    """The sandbox's timing precision ('fp32' or 'tf32')."""
    rep_ms: float = 200.0
    """In-process only: milliseconds of repetitions per timing."""
    device: int = 0
    """In-process only: the GPU that times kernels."""

    def evaluator(self):
        from ..sandbox import SandboxConfig
        from .evaluator import evaluator_for

        return evaluator_for(self.eval_url, SandboxConfig(precision=self.precision, rep_ms=self.rep_ms,
                                                          device=self.device))


class SingleTurnStage:
    TRAINER = "trl:GRPOConfig"
    DEFAULTS = dict(GRPO_DEFAULTS, max_completion_length=8192, output_dir="runs/single_turn")

    @dataclass
    class Config(SandboxSettings, RunSettings):
        model: str = DEFAULT_ACTOR
        """Actor initialization (HF name or path)."""
        tasks: str = ""
        """Task source: a .py file, a directory of them, or a synth/Ops-6K .parquet/.jsonl."""
        max_tasks: int | None = None
        reward_kind: str = "paper"
        """Key of ``sandbox.REWARDS``: 'paper' (r in {-1,1,2,3}), 'speedup', 'log_speedup'."""
        reward_max_parallel: int = 16
        """Completions evaluated at once (the service queues beyond its GPUs)."""

    def __init__(self, config: Config, args):
        self.config, self.args = config, args

    def run(self) -> Path:
        from datasets import Dataset
        from transformers import AutoTokenizer
        from trl import GRPOTrainer

        from .data import load_tasks, prompt_rows
        from .metrics import trainer_callback

        cfg, args = self.config, self.args
        save_config(cfg, args)
        tasks = load_tasks(cfg.tasks, cfg.max_tasks)
        if not tasks:
            raise ValueError(f"{cfg.tasks}: no tasks")
        log = run_log(cfg, args)
        reward = SandboxReward(SandboxReward.Config(kind=cfg.reward_kind, max_parallel=cfg.reward_max_parallel,
                                                    log_path=Path(args.output_dir) / "rollouts.jsonl"),
                               tasks, cfg.evaluator())
        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        tokenizer.padding_side = "left"
        trainer = GRPOTrainer(model=cfg.model, reward_funcs=[reward], args=args,
                              train_dataset=Dataset.from_list(prompt_rows(tasks)), processing_class=tokenizer,
                              callbacks=[trainer_callback(log, reward.stats)])
        trainer.train(resume_from_checkpoint=resume_checkpoint(cfg, args))
        return finish(trainer, log)
