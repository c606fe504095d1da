"""Stage 3, value pretraining: fit the critic to trajectory states -> outcome reward before
PPO, so the first agentic steps get useful advantages instead of a random critic's noise.

The critic is ``AutoModelForTokenClassification(num_labels=1)`` initialized from the actor: a
scalar value head on every token, the class verl's PPO critic loads (``critic.model.path``
takes this stage's ``final/`` as is). Every assistant token is a state; its target is the
episode's outcome reward (the return with gamma = 1 and a final-step reward). Loss: masked
``0.5 * (V - R)^2``; logged: ``value_loss``, ``explained_variance`` (per batch, over states),
and at the end ``final_explained_variance`` over the whole set.

    cuda-agent train value --model runs/rft/final --trajectories runs/agent/ --out runs/value
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .common import DEFAULT_ACTOR, RunSettings, finish, resume_checkpoint, run_log, save_config


class ValueStage:
    TRAINER = "transformers:TrainingArguments"
    DEFAULTS = dict(learning_rate=6e-6, max_steps=100, per_device_train_batch_size=1, gradient_accumulation_steps=32,
                    output_dir="runs/value")
    """The paper's critic learning rate (6e-6)."""

    @dataclass
    class Config(RunSettings):
        model: str = DEFAULT_ACTOR
        """Critic initialization (paper: from the actor; here the RFT stage's ``final/``)."""
        trajectories: str = ""
        """Agent trajectories, successes and failures alike."""
        reward_kind: str | None = None
        """Recompute each episode's reward from its verdict with this REWARDS key; None: as recorded."""
        max_length: int = 131072
        """Token limit per conversation (paper: 131k context); longer ones are truncated."""

    def __init__(self, config: Config, args):
        self.config, self.args = config, args

    def examples(self, tokenizer) -> list[dict]:
        """Tokenized states: input_ids, actor-token mask, per-token value targets."""
        from .data import assistant_token_mask, value_rows
        from .rlmath import outcome_reward
        from .trajectories import read_episodes

        cfg = self.config
        episodes = list(read_episodes(cfg.trajectories))
        if cfg.reward_kind:
            for ep in episodes:
                if ep.verdict:
                    ep.reward = outcome_reward(ep.verdict, cfg.reward_kind)
        episodes = [ep for ep in episodes if ep.reward is not None]  # harness errors: no value target
        out = []
        for row in value_rows(episodes):
            ids, mask = assistant_token_mask(tokenizer, row["messages"], row["tools"], cfg.max_length)
            if any(mask):
                out.append({"input_ids": ids, "mask": mask, "target": row["value_target"]})
        return out

    def run(self) -> Path:
        import torch
        from transformers import AutoModelForTokenClassification, AutoTokenizer, Trainer

        from .metrics import trainer_callback
        from .rlmath import explained_variance, value_loss

        cfg, args = self.config, self.args
        save_config(cfg, args)
        tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        examples = self.examples(tokenizer)
        if not examples:
            raise ValueError(f"{cfg.trajectories}: no episode with assistant turns")
        log = run_log(cfg, args)
        extra: dict[str, float] = {}
        model = AutoModelForTokenClassification.from_pretrained(cfg.model, num_labels=1)
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        pad = tokenizer.pad_token_id

        def collate(batch):
            n = max(len(b["input_ids"]) for b in batch)
            ids = torch.full((len(batch), n), pad, dtype=torch.long)
            attn = torch.zeros((len(batch), n), dtype=torch.long)
            mask = torch.zeros((len(batch), n))
            target = torch.zeros((len(batch), n))
            for i, b in enumerate(batch):  # right padding: positions stay 0..len-1
                k = len(b["input_ids"])
                ids[i, :k] = torch.tensor(b["input_ids"])
                attn[i, :k] = 1
                mask[i, :k] = torch.tensor(b["mask"], dtype=torch.float)
                target[i, :k] = b["target"]
            return {"input_ids": ids, "attention_mask": attn, "value_mask": mask, "returns": target}

        class ValueTrainer(Trainer):
            def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
                mask, returns = inputs.pop("value_mask"), inputs.pop("returns")
                out = model(**inputs)
                values = out.logits.squeeze(-1).float()
                loss = value_loss(values, returns, mask)
                sel = mask.bool()
                extra["value_loss"] = float(loss.detach())
                extra["explained_variance"] = explained_variance(values[sel].detach().cpu(), returns[sel].cpu())
                extra["value_mean"] = float(values[sel].mean().detach()) if sel.any() else 0.0
                return (loss, out) if return_outputs else loss

        trainer = ValueTrainer(model=model, args=args, train_dataset=examples, data_collator=collate,
                               processing_class=tokenizer, callbacks=[trainer_callback(log, extra)])
        trainer.train(resume_from_checkpoint=resume_checkpoint(cfg, args))
        ev = self.final_explained_variance(trainer.model, examples, collate)
        if trainer.is_world_process_zero():
            log.log(trainer.state.global_step, final_explained_variance=ev)
        return finish(trainer, log)

    @staticmethod
    def final_explained_variance(model, examples, collate, batch_size: int = 4) -> float:
        import torch

        from .rlmath import explained_variance

        preds, targets = [], []
        model.eval()
        device = next(model.parameters()).device
        with torch.no_grad():
            for i in range(0, len(examples), batch_size):
                b = collate(examples[i:i + batch_size])
                mask, returns = b.pop("value_mask").bool(), b.pop("returns")
                values = model(**{k: v.to(device) for k, v in b.items()}).logits.squeeze(-1).float().cpu()
                preds.append(values[mask])
                targets.append(returns[mask])
        return explained_variance(torch.cat(preds), torch.cat(targets))
