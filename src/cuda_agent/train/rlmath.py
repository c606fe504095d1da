"""RL math in tiny functions, each unit-tested with hand-computed numbers (tests/test_train_rlmath.py).

Shapes: 1-D sequences are lists or 1-D tensors over steps ``t = 0..T-1``; groups are
``[num_prompts * group_size]`` flattened prompt-major (TRL's and verl's layout).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch


def outcome_reward(verdict: Any, kind: str = "paper") -> float:
    """The outcome reward of one episode: ``REWARDS[kind]`` of its Verdict (a Verdict or its
    JSON dict). ``paper``: r in {-1, 1, 2, 3}; ``speedup``: t_compile / t; ``log_speedup``."""
    from ..sandbox import REWARDS, Verdict

    if isinstance(verdict, Mapping):
        verdict = Verdict.from_dict(dict(verdict))
    return float(REWARDS[kind](verdict))


def gae(rewards: Sequence[float], values: Sequence[float], gamma: float = 1.0, lam: float = 0.95,
        last_value: float = 0.0) -> tuple[list[float], list[float]]:
    """Generalized advantage estimation over one episode.

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` (``V_T = last_value``, 0 at a terminal state);
    ``A_t = delta_t + gamma * lam * A_{t+1}``; returns ``(advantages, returns = A + V)``.
    The paper: gamma = 1, lam = 0.95, the outcome reward on the last step, 0 elsewhere.
    """
    if len(rewards) != len(values):
        raise ValueError(f"rewards ({len(rewards)}) and values ({len(values)}) differ in length")
    adv = [0.0] * len(rewards)
    running, next_value = 0.0, float(last_value)
    for t in reversed(range(len(rewards))):
        delta = float(rewards[t]) + gamma * next_value - float(values[t])
        running = delta + gamma * lam * running
        adv[t] = running
        next_value = float(values[t])
    return adv, [a + float(v) for a, v in zip(adv, values)]


def outcome_rewards(num_steps: int, final_reward: float) -> list[float]:
    """A sparse reward sequence: ``final_reward`` on the last step, 0 before it."""
    return [0.0] * (num_steps - 1) + [float(final_reward)] if num_steps > 0 else []


def explained_variance(y_pred: Sequence[float] | torch.Tensor, y_true: Sequence[float] | torch.Tensor) -> float:
    """``1 - Var(y - y_pred) / Var(y)`` (population variances); NaN when ``Var(y) == 0``.
    1 is a perfect critic, 0 one no better than the mean, negative one worse."""
    y_pred = torch.as_tensor(y_pred, dtype=torch.float64).flatten()
    y_true = torch.as_tensor(y_true, dtype=torch.float64).flatten()
    var_y = torch.var(y_true, unbiased=False)
    if y_true.numel() == 0 or var_y.item() == 0.0:
        return math.nan
    return float(1.0 - torch.var(y_true - y_pred, unbiased=False) / var_y)


def normalize_advantages(adv: Sequence[float] | torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Whiten a batch of advantages: ``(a - mean) / (std + eps)``, population std."""
    a = torch.as_tensor(adv, dtype=torch.float32)
    return (a - a.mean()) / (a.std(unbiased=False) + eps)


def masked_normalize(adv: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Whiten only where ``mask`` is 1 (actor tokens; tool output and padding excluded); 0 elsewhere."""
    m = mask.to(adv.dtype)
    n = m.sum().clamp(min=1.0)
    mean = (adv * m).sum() / n
    var = (((adv - mean) * m) ** 2).sum() / n
    return (adv - mean) / (var.sqrt() + eps) * m


def group_advantages(rewards: Sequence[float] | torch.Tensor, group_size: int, scale: bool = True,
                     eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantage: reward minus its group's mean, divided by the group's std (sample std,
    as TRL) when ``scale``. A group whose rewards are all equal gets zero advantage."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    if r.numel() % group_size:
        raise ValueError(f"{r.numel()} rewards do not split into groups of {group_size}")
    g = r.view(-1, group_size)
    a = g - g.mean(dim=1, keepdim=True)
    if scale:
        std = g.std(dim=1, keepdim=True)
        a = torch.where(std > 0, a / (std + eps), torch.zeros_like(a))
    return a.flatten()


def ppo_clip_loss(logratio: torch.Tensor, adv: torch.Tensor, eps_low: float = 0.2, eps_high: float = 0.28) -> torch.Tensor:
    """Per-token clipped surrogate with asymmetric ("clip-higher") bounds, to be minimized:
    ``-min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)``, ``rho = exp(logratio)``."""
    rho = torch.exp(logratio)
    return -torch.minimum(rho * adv, torch.clamp(rho, 1.0 - eps_low, 1.0 + eps_high) * adv)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` where ``mask`` is 1 (token-mean loss aggregation)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Critic regression: ``0.5 * mean((V - R)^2)`` over masked positions."""
    return 0.5 * masked_mean((values - returns) ** 2, mask)


def reward_distribution(rewards: Sequence[float]) -> dict[str, float]:
    """Fraction of episodes at each reward value, keys ``reward_frac_<value>`` (``-1``, ``1``, ...)."""
    if not rewards:
        return {}
    out: dict[str, float] = {}
    for r in rewards:
        key = f"reward_frac_{float(r):g}"
        out[key] = out.get(key, 0.0) + 1.0 / len(rewards)
    return dict(sorted(out.items()))
