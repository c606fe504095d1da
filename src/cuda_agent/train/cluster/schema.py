"""Validation of our verl YAML configs, without verl, Hydra or OmegaConf.

What is checked (``cuda-agent train verl-check configs/verl/ppo_agentic.yaml``):

* every key we set is one verl's PPO trainer config has (:data:`KNOWN_KEYS`, written from
  verl's ``ppo_trainer.yaml``; a typo would otherwise become a silent Hydra error or a key
  verl never reads);
* the paper's numbers, when ``paper=True`` (:data:`PAPER`): GAE gamma 1 / lambda 0.95, clip
  0.2 / 0.28, actor lr 3e-6, critic lr 6e-6, 150 steps, 150 turns, 131,072-token context,
  1024 trajectories per step;
* consistency: rollout lengths equal data lengths and fit ``max_model_len``; the agent loop
  file exists, names ``default_agent_loop`` and a ``_target_`` that imports; value types.

Composition (``defaults:``) is followed for files of this directory; ``${oc.env:VAR,default}``
is resolved from the environment; ``${a.b}`` from the merged config.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

import yaml

KNOWN_KEYS: frozenset[str] = frozenset("""
algorithm.adv_estimator algorithm.gamma algorithm.lam algorithm.use_kl_in_reward algorithm.kl_penalty
algorithm.norm_adv_by_std_in_grpo algorithm.kl_ctrl.kl_coef
data.train_files data.val_files data.prompt_key data.return_raw_chat data.train_batch_size data.val_batch_size
data.max_prompt_length data.max_response_length data.filter_overlong_prompts data.truncation data.shuffle data.seed
data.dataloader_num_workers data.reward_fn_key data.tool_config_path data.apply_chat_template_kwargs
actor_rollout_ref.hybrid_engine actor_rollout_ref.model.path actor_rollout_ref.model.enable_gradient_checkpointing
actor_rollout_ref.model.use_remove_padding actor_rollout_ref.model.custom_chat_template
actor_rollout_ref.model.trust_remote_code actor_rollout_ref.model.lora_rank
actor_rollout_ref.actor.strategy actor_rollout_ref.actor.optim.lr actor_rollout_ref.actor.optim.weight_decay
actor_rollout_ref.actor.optim.lr_warmup_steps actor_rollout_ref.actor.optim.clip_grad
actor_rollout_ref.actor.ppo_mini_batch_size actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
actor_rollout_ref.actor.ppo_epochs actor_rollout_ref.actor.use_dynamic_bsz actor_rollout_ref.actor.ppo_max_token_len_per_gpu
actor_rollout_ref.actor.clip_ratio actor_rollout_ref.actor.clip_ratio_low actor_rollout_ref.actor.clip_ratio_high
actor_rollout_ref.actor.clip_ratio_c actor_rollout_ref.actor.loss_agg_mode actor_rollout_ref.actor.entropy_coeff
actor_rollout_ref.actor.use_kl_loss actor_rollout_ref.actor.kl_loss_coef actor_rollout_ref.actor.kl_loss_type
actor_rollout_ref.actor.fsdp_config.param_offload actor_rollout_ref.actor.fsdp_config.optimizer_offload
actor_rollout_ref.rollout.name actor_rollout_ref.rollout.mode actor_rollout_ref.rollout.n
actor_rollout_ref.rollout.temperature actor_rollout_ref.rollout.top_p actor_rollout_ref.rollout.top_k
actor_rollout_ref.rollout.prompt_length actor_rollout_ref.rollout.response_length actor_rollout_ref.rollout.max_model_len
actor_rollout_ref.rollout.tensor_model_parallel_size actor_rollout_ref.rollout.gpu_memory_utilization
actor_rollout_ref.rollout.max_num_batched_tokens actor_rollout_ref.rollout.calculate_log_probs
actor_rollout_ref.rollout.multi_turn.enable actor_rollout_ref.rollout.multi_turn.max_assistant_turns
actor_rollout_ref.rollout.multi_turn.max_user_turns actor_rollout_ref.rollout.multi_turn.format
actor_rollout_ref.rollout.multi_turn.tool_config_path actor_rollout_ref.rollout.multi_turn.max_tool_response_length
actor_rollout_ref.rollout.agent.num_workers actor_rollout_ref.rollout.agent.default_agent_loop
actor_rollout_ref.rollout.agent.agent_loop_config_path
critic.strategy critic.optim.lr critic.optim.weight_decay critic.optim.lr_warmup_steps critic.model.path
critic.model.enable_gradient_checkpointing critic.model.use_remove_padding critic.ppo_mini_batch_size
critic.ppo_micro_batch_size_per_gpu critic.use_dynamic_bsz critic.ppo_max_token_len_per_gpu critic.cliprange_value
critic.ppo_epochs critic.grad_clip
reward_model.enable custom_reward_function.path custom_reward_function.name
trainer.project_name trainer.experiment_name trainer.total_training_steps trainer.total_epochs trainer.critic_warmup
trainer.save_freq trainer.test_freq trainer.val_before_train trainer.resume_mode trainer.resume_from_path
trainer.default_local_dir trainer.logger trainer.nnodes trainer.n_gpus_per_node trainer.max_actor_ckpt_to_keep
trainer.max_critic_ckpt_to_keep
""".split())

PAPER: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.gamma": 1.0,
    "algorithm.lam": 0.95,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.optim.lr": 3e-6,
    "critic.optim.lr": 6e-6,
    "trainer.total_training_steps": 150,
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 150,
    "actor_rollout_ref.rollout.max_model_len": 131072,
}
PAPER_TRAJECTORIES_PER_STEP = 1024
_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")
_REF = re.compile(r"\$\{([a-z_][a-z0-9_.]*)\}")


def load_config(path: str | Path) -> dict[str, Any]:
    """The config after our files' ``defaults:`` (verl's own ``ppo_trainer`` is skipped) and
    ``_self_`` merge, with env interpolations resolved."""
    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    merged: dict[str, Any] = {}
    for entry in data.pop("defaults", []) or []:
        name = entry if isinstance(entry, str) else None
        if name and name != "_self_" and (path.parent / f"{name}.yaml").is_file():
            _merge(merged, load_config(path.parent / f"{name}.yaml"))
    data.pop("hydra", None)
    _merge(merged, data)
    return _resolve(merged, merged)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and k not in ("apply_chat_template_kwargs",):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def validate(path: str | Path, paper: bool = True, check_files: bool = False) -> list[str]:
    """Problems with the config at ``path`` (empty: fine)."""
    path = Path(path)
    flat = flatten(load_config(path))
    errors = [f"{k}: not a key of verl's PPO trainer config (typo?)" for k in flat if k not in KNOWN_KEYS]
    g = flat.get
    if paper:
        for k, want in PAPER.items():
            if g(k) != want:
                errors.append(f"{k}: {g(k)!r}, the paper's recipe has {want!r}")
        traj = _int(g("data.train_batch_size")) * _int(g("actor_rollout_ref.rollout.n"), 1)
        if traj != PAPER_TRAJECTORIES_PER_STEP:
            errors.append(f"data.train_batch_size x rollout.n = {traj} trajectories per step; the paper uses 1024")
    for a, b in (("actor_rollout_ref.rollout.prompt_length", "data.max_prompt_length"),
                 ("actor_rollout_ref.rollout.response_length", "data.max_response_length")):
        if g(a) is not None and g(b) is not None and g(a) != g(b):
            errors.append(f"{a} ({g(a)}) differs from {b} ({g(b)})")
    total = _int(g("data.max_prompt_length")) + _int(g("data.max_response_length"))
    if g("actor_rollout_ref.rollout.max_model_len") is not None and total > _int(g("actor_rollout_ref.rollout.max_model_len")):
        errors.append(f"prompt + response = {total} tokens exceeds rollout.max_model_len")
    for k in ("actor_rollout_ref.actor.ppo_mini_batch_size", "critic.ppo_mini_batch_size"):
        if g(k) is not None and _int(g("data.train_batch_size")) % max(_int(g(k)), 1):
            errors.append(f"{k} ({g(k)}) must divide data.train_batch_size ({g('data.train_batch_size')})")
    if g("algorithm.adv_estimator") == "gae" and not g("critic.model.path"):
        errors.append("algorithm.adv_estimator is gae but critic.model.path is empty")
    if g("actor_rollout_ref.rollout.multi_turn.format") not in (None, "hermes", "llama3_json", "qwen3_coder"):
        errors.append("multi_turn.format: our text parser reads hermes, llama3_json and qwen3_coder (other formats "
                      "need a tokenizer with a response template, checked when the agent loop starts)")
    errors += _check_agent_loops(flat, path)
    if check_files:
        for k in ("actor_rollout_ref.model.path", "critic.model.path", "data.train_files"):
            if g(k) and not Path(str(g(k))).exists():
                errors.append(f"{k}: {g(k)} does not exist")
    return errors


def _check_agent_loops(flat: dict[str, Any], path: Path) -> list[str]:
    default = flat.get("actor_rollout_ref.rollout.agent.default_agent_loop")
    loops_path = flat.get("actor_rollout_ref.rollout.agent.agent_loop_config_path")
    if not loops_path:
        return [] if default in (None, "single_turn_agent", "tool_agent") else \
            [f"default_agent_loop {default!r} needs agent_loop_config_path"]
    p = Path(str(loops_path))
    p = p if p.is_absolute() or p.exists() else path.parent.parent.parent / p
    if not p.is_file():
        return [f"agent_loop_config_path: {loops_path} not found"]
    loops = _resolve(yaml.safe_load(p.read_text()) or [], {})
    errors, names = [], set()
    for entry in loops:
        names.add(entry.get("name"))
        module, _, cls = str(entry.get("_target_", "")).rpartition(".")
        try:
            if not isinstance(getattr(importlib.import_module(module), cls), type):
                errors.append(f"{p}: {entry.get('_target_')} is not a class")
        except (ImportError, AttributeError, ValueError) as e:
            errors.append(f"{p}: _target_ {entry.get('_target_')!r} does not import: {e}")
    if default not in names | {"single_turn_agent", "tool_agent"}:
        errors.append(f"default_agent_loop {default!r} is not in {p} (has {sorted(n for n in names if n)})")
    return errors


def _merge(base: dict, over: dict) -> None:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def _resolve(node: Any, root: dict) -> Any:
    if isinstance(node, dict):
        return {k: _resolve(v, root) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, root) for v in node]
    if isinstance(node, str):
        whole = _ENV.fullmatch(node)
        if whole:
            return yaml.safe_load(os.environ.get(whole[1], _unquote(whole[2])))
        node = _ENV.sub(lambda m: os.environ.get(m[1], _unquote(m[2])), node)
        ref = _REF.fullmatch(node)
        if ref:
            return _lookup(root, ref[1], node)
        return _REF.sub(lambda m: str(_lookup(root, m[1], m[0])), node)
    return node


def _lookup(root: dict, dotted: str, fallback: Any) -> Any:
    cur: Any = root
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return fallback
        cur = cur[part]
    return _resolve(cur, root) if isinstance(cur, str) else cur


def _unquote(s: str | None) -> str:
    s = (s or "").strip()
    return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" else s


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default
