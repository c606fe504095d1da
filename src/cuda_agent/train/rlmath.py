"""The few numbers our stages compute themselves, each tested by hand (tests/test_train_rlmath.py).

Advantages, the PPO loss and GRPO's group normalization are the engines' (TRL's ``GRPOTrainer``,
verl's ``gae`` estimator); this module holds only what a stage here uses and the engines lack: the
outcome reward of a verdict, the value stage's loss and explained variance, and the reward
distribution logged by the GRPO stages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch


def outcome_reward(verdict: Any, kind: str = "paper") -> float | None:
    """The outcome reward of one episode: ``REWARDS[kind]`` of its Verdict (a Verdict or its
    JSON dict). ``paper``: r in {-1, 1, 2, 3}; ``speedup``: t_compile / t; ``log_speedup``.
    None for a harness_error: such an episode says nothing about the policy and is left out."""
    from ..sandbox import REWARDS, Verdict

    if isinstance(verdict, Mapping):
        verdict = Verdict.from_dict(dict(verdict))
    r = REWARDS[kind](verdict)
    return None if r is None else float(r)


def explained_variance(y_pred: Sequence[float] | torch.Tensor, y_true: Sequence[float] | torch.Tensor) -> float:
    """``1 - Var(y - y_pred) / Var(y)`` (population variances); NaN when ``Var(y) == 0``.
    1 is a perfect critic, 0 one no better than the mean, negative one worse."""
    y_pred = torch.as_tensor(y_pred, dtype=torch.float64).flatten()
    y_true = torch.as_tensor(y_true, dtype=torch.float64).flatten()
    var_y = torch.var(y_true, unbiased=False)
    if y_true.numel() == 0 or var_y.item() == 0.0:
        return math.nan
    return float(1.0 - torch.var(y_true - y_pred, unbiased=False) / var_y)


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
