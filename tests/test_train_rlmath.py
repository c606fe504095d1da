"""The stages' own numbers (rlmath), with hand-computed values."""

import math

import pytest
import torch

from cuda_agent.sandbox import Verdict
from cuda_agent.train import rlmath


def test_explained_variance_by_hand():
    # residual [0,0,0,1]: var 0.1875; var(y) = 1.25 -> 1 - 0.15 = 0.85
    assert rlmath.explained_variance([1, 2, 3, 3], [1, 2, 3, 4]) == pytest.approx(0.85)
    assert rlmath.explained_variance([2.5] * 4, [1, 2, 3, 4]) == pytest.approx(0.0)
    assert math.isnan(rlmath.explained_variance([1, 2], [3, 3]))


def test_value_loss_masked():
    v, r, m = torch.tensor([1.0, 5.0, 3.0]), torch.tensor([2.0, 0.0, 1.0]), torch.tensor([1, 0, 1])
    assert float(rlmath.value_loss(v, r, m)) == pytest.approx(0.5 * (1 + 4) / 2)


def _verdict(verdict="correct", eager=None, compile_=None):
    return Verdict(verdict=verdict, speedup_vs_eager=eager, speedup_vs_compile=compile_)


def test_reward_mapping_paper_and_ablations():
    assert rlmath.outcome_reward(_verdict("compile_error")) == -1
    assert rlmath.outcome_reward(_verdict(eager=1.0, compile_=0.5)) == 1
    assert rlmath.outcome_reward(_verdict(eager=1.06, compile_=1.0)) == 2
    assert rlmath.outcome_reward(_verdict(eager=2.0, compile_=1.06)) == 3
    assert rlmath.outcome_reward(_verdict(eager=2.0, compile_=1.5), "speedup") == 1.5
    assert rlmath.outcome_reward(_verdict(eager=2.0, compile_=math.e), "log_speedup") == pytest.approx(1.0)
    assert rlmath.outcome_reward(_verdict("rejected").to_dict(), "speedup") == -1  # the JSON form works too


def test_reward_distribution():
    d = rlmath.reward_distribution([-1, -1, 1, 3])
    assert d == {"reward_frac_-1": 0.5, "reward_frac_1": 0.25, "reward_frac_3": 0.25}
