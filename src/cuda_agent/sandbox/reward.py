"""Rewards: pure functions of a Verdict.

``paper_reward`` is the CUDA Agent paper's r in {-1, 1, 2, 3}. The others are for ablations
(issue: training recipe). Add one by writing a function and one REWARDS entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .verdict import Verdict

FASTER_MARGIN = 1.05
"""'Faster' means more than 5% faster, as in the paper."""


def paper_reward(v: Verdict) -> float:
    """-1 not correct; 3 if >5% faster than eager and compile; 2 if >5% faster than eager; else 1."""
    if not v.ok:
        return -1.0
    faster_eager = v.speedup_vs_eager is not None and v.speedup_vs_eager > FASTER_MARGIN
    faster_compile = v.speedup_vs_compile is not None and v.speedup_vs_compile > FASTER_MARGIN
    if faster_eager and faster_compile:
        return 3.0
    if faster_eager:
        return 2.0
    return 1.0


def speedup_reward(v: Verdict) -> float:
    """Raw t_compile / t for correct solutions (t_eager / t if compile has no baseline), else -1."""
    if not v.ok:
        return -1.0
    s = v.speedup_vs_compile if v.speedup_vs_compile is not None else v.speedup_vs_eager
    return float(s) if s is not None else 0.0


def log_speedup_reward(v: Verdict) -> float:
    """log(t_compile / t) for correct solutions, else -1."""
    if not v.ok:
        return -1.0
    s = v.speedup_vs_compile if v.speedup_vs_compile is not None else v.speedup_vs_eager
    return math.log(s) if s else 0.0


REWARDS: dict[str, Callable[[Verdict], float]] = {
    "paper": paper_reward,
    "speedup": speedup_reward,
    "log_speedup": log_speedup_reward,
}


def reward(v: Verdict, kind: str = "paper") -> float:
    return REWARDS[kind](v)
