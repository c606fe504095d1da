"""What every stage shares: the optimizer/schedule/checkpoint config, the run directory, resume.

Defaults are for real use (the paper's numbers where it gives them); presets in
:mod:`cuda_agent.train.presets` shrink them for smoke runs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

DEFAULT_ACTOR = "Qwen/Qwen3-8B"
"""Default actor (and critic) initialization for real runs; any HF causal LM path or name."""


@dataclass
class OptimConfig:
    """Optimizer, schedule, batch and checkpointing of one stage (HF TrainingArguments names)."""

    lr: float = 3e-6
    """Learning rate (paper: actor 3e-6, critic 6e-6)."""
    max_steps: int = 150
    """Optimizer steps (paper: 150 for agentic RL)."""
    per_device_batch: int = 8
    """Sequences per device per micro-step."""
    grad_accum: int = 16
    """Micro-steps per optimizer step: global batch = per_device_batch * grad_accum * world size
    (paper: 1024)."""
    warmup_steps: int = 0
    lr_scheduler: str = "constant_with_warmup"
    """transformers scheduler name ('constant_with_warmup', 'linear', 'cosine'); verl's default is constant."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    save_steps: int = 10
    """Checkpoint every N steps (a killed run resumes from the newest)."""
    save_total_limit: int = 3
    logging_steps: int = 1
    seed: int = 0
    bf16: bool = True
    """bf16 on GPU; forced off on CPU."""
    gradient_checkpointing: bool = False


@dataclass
class GRPOSettings:
    """The GRPO knobs of both TRL stages (single-turn and agentic): the paper's asymmetric clip
    range, no KL term by default. Each stage's ``Config`` inherits them."""

    num_generations: int = 8
    """Completions per prompt (the GRPO group)."""
    temperature: float = 1.0
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28
    beta: float = 0.0
    """KL coefficient to the reference model (0: no reference model is loaded)."""
    loss_type: str = "dapo"
    """TRL loss aggregation ('dapo' = token-mean over the batch, as verl's token-mean)."""
    use_vllm: bool = False
    """Generate with vLLM (TRL's colocate mode) on GPU hosts that have it."""

    def grpo_arguments(self) -> dict[str, Any]:
        """These settings as ``trl.GRPOConfig`` keyword arguments."""
        return dict(num_generations=self.num_generations, temperature=self.temperature, epsilon=self.epsilon_low,
                    epsilon_high=self.epsilon_high, beta=self.beta, loss_type=self.loss_type,
                    use_vllm=self.use_vllm, **({"vllm_mode": "colocate"} if self.use_vllm else {}))


@dataclass
class RunConfig:
    """Where a stage writes, and whether it picks up where it stopped."""

    out: str = "runs/stage"
    resume: bool = True
    """Resume from the newest ``checkpoint-*`` in ``out`` when there is one."""
    tensorboard: bool = True


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def training_arguments(optim: OptimConfig, run: RunConfig) -> dict[str, Any]:
    """Keyword arguments shared by TrainingArguments / GRPOConfig / SFTConfig."""
    cuda = has_cuda()
    return dict(output_dir=run.out, learning_rate=optim.lr, max_steps=optim.max_steps,
                per_device_train_batch_size=optim.per_device_batch, gradient_accumulation_steps=optim.grad_accum,
                warmup_steps=optim.warmup_steps, lr_scheduler_type=optim.lr_scheduler, weight_decay=optim.weight_decay, max_grad_norm=optim.max_grad_norm,
                save_strategy="steps", save_steps=optim.save_steps, save_total_limit=optim.save_total_limit,
                logging_steps=optim.logging_steps, seed=optim.seed, bf16=bool(optim.bf16 and cuda),
                use_cpu=not cuda, report_to=[], disable_tqdm=True, dataloader_num_workers=0,
                gradient_checkpointing=optim.gradient_checkpointing, remove_unused_columns=False)


def resume_checkpoint(run: RunConfig) -> str | None:
    """The newest checkpoint to resume from, or None (fresh run or resume off)."""
    if not run.resume or not Path(run.out).is_dir():
        return None
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(run.out)


def save_config(config: Any, out: str | Path) -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(asdict(config), indent=2, default=str) + "\n")


def apply_overrides(config: Any, overrides: list[str]) -> Any:
    """``key=value`` / ``a.b=value`` overrides onto a (nested) config dataclass, in place.
    Values are parsed as JSON when they parse, else kept as strings."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        target, parts = config, key.split(".")
        for p in parts[:-1]:
            target = getattr(target, p)
        names = {f.name for f in fields(target)} if is_dataclass(target) else set()
        if parts[-1] not in names:
            raise ValueError(f"override {key!r}: no such field (have: {', '.join(sorted(names))})")
        setattr(target, parts[-1], value)
    return config


def finish(trainer, out: str | Path, log) -> Path:
    """Save the final model + tokenizer to ``<out>/final`` and close the run log."""
    final = Path(out) / "final"
    trainer.save_model(str(final))
    tok = getattr(trainer, "processing_class", None)
    if tok is not None:
        tok.save_pretrained(str(final))
    log.close()
    return final

