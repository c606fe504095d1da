"""Rewards: pure functions of a Verdict.

``paper_reward`` is the CUDA Agent paper's r in {-1, 1, 2, 3}. The others are for ablations
(issue: training recipe). Add one by writing a function and one REWARDS entry.

Every reward is None for a ``harness_error`` verdict (the reference crashed, a worker was killed
from outside, the harness raised): such a verdict says nothing about the candidate, so it has no
reward. None is never a positive reward: training leaves the sample out of its batch (TRL treats a
sample whose every reward is None as unscorable: no advantage, out of the group baseline) and bench
retries the attempt once and counts harness errors apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .verdict import HARNESS_ERROR, Verdict

FASTER_MARGIN = 1.05
"""'Faster' means more than 5% faster, as in the paper."""


def paper_reward(v: Verdict) -> float | None:
    """-1 not correct; 3 if >5% faster than eager and compile; 2 if >5% faster than eager; else 1."""
    if v.harness_error:
        return None
    if not v.ok:
        return -1.0
    faster_eager = v.speedup_vs_eager is not None and v.speedup_vs_eager > FASTER_MARGIN
    faster_compile = v.speedup_vs_compile is not None and v.speedup_vs_compile > FASTER_MARGIN
    if faster_eager and faster_compile:
        return 3.0
    if faster_eager:
        return 2.0
    return 1.0


def speedup_reward(v: Verdict) -> float | None:
    """Raw t_compile / t for correct solutions (t_eager / t if compile has no baseline), else -1."""
    if v.harness_error:
        return None
    if not v.ok:
        return -1.0
    s = v.speedup_vs_compile if v.speedup_vs_compile is not None else v.speedup_vs_eager
    return float(s) if s is not None else 0.0


def log_speedup_reward(v: Verdict) -> float | None:
    """log(t_compile / t) for correct solutions, else -1."""
    if v.harness_error:
        return None
    if not v.ok:
        return -1.0
    s = v.speedup_vs_compile if v.speedup_vs_compile is not None else v.speedup_vs_eager
    return math.log(s) if s else 0.0


REWARDS: dict[str, Callable[[Verdict], float | None]] = {
    "paper": paper_reward,
    "speedup": speedup_reward,
    "log_speedup": log_speedup_reward,
}


def reward(v: Verdict, kind: str = "paper") -> float | None:
    return REWARDS[kind](v)


def outcome_reward(best: dict | None, last: dict | None, kind: str = "paper") -> float | None:
    """An episode's outcome reward from its verdicts (JSON form): the best correct solution's reward;
    without one, -1, or None when the last verification was a harness_error (the episode is left
    out of training: what failed was not the policy's kernel)."""
    if best is not None:
        return REWARDS[kind](Verdict.from_dict(best))
    if last is not None and last.get("verdict") == HARNESS_ERROR:
        return None
    return -1.0
