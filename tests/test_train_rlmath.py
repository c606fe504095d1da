"""RL math with hand-computed numbers."""

import math

import pytest
import torch

from cuda_agent.sandbox import Verdict
from cuda_agent.train import rlmath


def test_gae_gamma1_lambda095_by_hand():
    # delta2 = 1 - 0.4 = 0.6; delta1 = 0 + 0.4 - 0.2 = 0.2; delta0 = 0 + 0.2 - 0.5 = -0.3
    # A2 = 0.6; A1 = 0.2 + 0.95 * 0.6 = 0.77; A0 = -0.3 + 0.95 * 0.77 = 0.4315
    adv, ret = rlmath.gae([0, 0, 1], [0.5, 0.2, 0.4], gamma=1.0, lam=0.95)
    assert adv == pytest.approx([0.4315, 0.77, 0.6])
    assert ret == pytest.approx([0.9315, 0.97, 1.0])


def test_gae_discount_and_bootstrap():
    # gamma 0.5, lam 1: A1 = 2 + 0.5*4 - 1 = 3; A0 = (0 + 0.5*1 - 0) + 0.5*3 = 2
    adv, _ = rlmath.gae([0, 2], [0, 1], gamma=0.5, lam=1.0, last_value=4.0)
    assert adv == pytest.approx([2.0, 3.0])


def test_gae_lambda1_gamma1_is_return_minus_value():
    adv, ret = rlmath.gae(rlmath.outcome_rewards(3, 2.0), [0.1, 0.2, 0.3], 1.0, 1.0)
    assert ret == pytest.approx([2.0, 2.0, 2.0]) and adv == pytest.approx([1.9, 1.8, 1.7])


def test_gae_length_mismatch():
    with pytest.raises(ValueError):
        rlmath.gae([0, 1], [0.0])


def test_explained_variance_by_hand():
    # residual [0,0,0,1]: var 0.1875; var(y) = 1.25 -> 1 - 0.15 = 0.85
    assert rlmath.explained_variance([1, 2, 3, 3], [1, 2, 3, 4]) == pytest.approx(0.85)
    assert rlmath.explained_variance([2.5] * 4, [1, 2, 3, 4]) == pytest.approx(0.0)
    assert math.isnan(rlmath.explained_variance([1, 2], [3, 3]))


def test_normalize_advantages_by_hand():
    # mean 2, population std sqrt(2/3)
    a = rlmath.normalize_advantages([1.0, 2.0, 3.0])
    s = math.sqrt(2 / 3)
    assert a.tolist() == pytest.approx([-1 / s, 0.0, 1 / s], rel=1e-5)


def test_masked_normalize_ignores_tool_tokens():
    adv = torch.tensor([1.0, 100.0, 3.0])
    out = rlmath.masked_normalize(adv, torch.tensor([1, 0, 1]))
    assert out.tolist() == pytest.approx([-1.0, 0.0, 1.0], rel=1e-5)


def test_group_advantages_by_hand():
    # group [1, 3]: mean 2, sample std sqrt(2); group [-1,-1]: zero
    a = rlmath.group_advantages([1.0, 3.0, -1.0, -1.0], group_size=2, eps=0.0)
    s = math.sqrt(2)
    assert a.tolist() == pytest.approx([-1 / s, 1 / s, 0.0, 0.0], rel=1e-5)
    assert rlmath.group_advantages([1.0, 3.0], 2, scale=False).tolist() == [-1.0, 1.0]
    with pytest.raises(ValueError):
        rlmath.group_advantages([1.0, 2.0, 3.0], 2)


def test_ppo_clip_is_asymmetric():
    lr = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss = rlmath.ppo_clip_loss(lr, adv, 0.2, 0.28)
    # A>0, rho 1.5 -> clipped at 1.28; A<0, rho 1.5 -> min(-1.5, -1.28) = -1.5;
    # A>0, rho 0.5 -> min(0.5, 0.8) = 0.5; A<0, rho 0.5 -> min(-0.5, -0.8) = -0.8
    assert loss.tolist() == pytest.approx([-1.28, 1.5, -0.5, 0.8], rel=1e-5)


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
