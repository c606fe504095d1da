"""Output comparison, the reward functions and the Verdict record: pure CPU functions."""

import json
import math

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.sandbox.compare import compare  # noqa: E402
from cuda_agent.sandbox import compare as compare_module  # noqa: E402
from cuda_agent.sandbox.reward import REWARDS, log_speedup_reward, paper_reward, reward, speedup_reward  # noqa: E402
from cuda_agent.sandbox.verdict import CORRECT, INCORRECT, REJECTED, RUNTIME_ERROR, VERDICTS, Verdict  # noqa: E402


@pytest.fixture
def ref():
    return torch.randn(4096, generator=torch.Generator().manual_seed(0))


def with_rel_noise(ref: torch.Tensor, rel: float) -> torch.Tensor:
    """ref plus noise whose L2 norm is ``rel`` times ref's."""
    noise = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    return ref + noise * (rel * ref.norm() / noise.norm())


# ----------------------------------------------------------------------------- compare

def test_identical_outputs_match(ref):
    c = compare(ref.clone(), ref)
    assert c.ok and c.problem is None and c.rel_err == 0 and c.max_abs_err == 0 and c.allclose_1e2


def test_tf32_level_noise_fails_strict_fp32_but_passes_tf32_mode(ref):
    out = with_rel_noise(ref, 1e-3)
    strict, relaxed = compare(out, ref, "fp32"), compare(out, ref, "tf32")
    assert strict.rel_err == pytest.approx(1e-3, rel=0.05)
    assert not strict.ok and strict.problem is None and strict.tolerance == 1e-4
    assert relaxed.ok
    assert strict.allclose_1e2, "the paper's allclose(1e-2) still holds: the strict test is tighter"


def test_fp32_rounding_level_noise_passes_strict_mode(ref):
    assert compare(with_rel_noise(ref, 1e-6), ref, "fp32").ok


def test_nan_in_the_same_places_matches(ref):
    ref = ref.clone()
    ref[[3, 10]] = float("nan")
    ref[20] = float("inf")
    assert compare(ref.clone(), ref).ok


def test_nan_in_other_places_is_a_problem(ref):
    out, want = ref.clone(), ref.clone()
    out[3] = float("nan")
    want[4] = float("nan")
    c = compare(out, want)
    assert not c.ok and c.problem and "non-finite" in c.problem


def test_nan_where_reference_is_finite_is_a_problem(ref):
    out = ref.clone()
    out[0] = float("nan")
    assert compare(out, ref).problem


def test_inf_of_the_wrong_sign_is_a_problem(ref):
    out, want = ref.clone(), ref.clone()
    out[0], want[0] = -float("inf"), float("inf")
    assert not compare(out, want).ok


def test_shape_mismatch_is_a_problem(ref):
    c = compare(ref.view(64, 64), ref)
    assert not c.ok and "shape" in c.problem


def test_dtype_mismatch_is_a_problem(ref):
    c = compare(ref.double(), ref)
    assert not c.ok and "dtype" in c.problem


@pytest.mark.parametrize("out,want", [
    ("tuple2", "tensor"), ("tuple1", "tuple2"), ("list2", "tuple2"), ("tensor", "tuple1"), ("float", "tensor"),
])
def test_structure_mismatch_is_a_problem(ref, out, want):
    make = {"tensor": ref, "tuple1": (ref,), "tuple2": (ref, ref), "list2": [ref, ref], "float": 1.0}
    c = compare(make[out], make[want])
    assert not c.ok and c.problem


def test_integer_outputs_must_match_exactly():
    want = torch.arange(100)
    assert compare(want.clone(), want).ok
    out = want.clone()
    out[7] += 1
    c = compare(out, want)
    assert not c.ok and "1 of 100" in c.worst


def test_bool_outputs_must_match_exactly():
    want = torch.tensor([True, False, True])
    assert not compare(torch.tensor([True, True, True]), want).ok


def test_tuples_are_compared_element_wise(ref):
    good = compare((ref.clone(), ref * 2), (ref, ref * 2))
    assert good.ok
    bad = compare((ref.clone(), ref + 1), (ref, ref))
    assert not bad.ok and "out[1]" in bad.worst


def test_nested_structures_are_compared(ref):
    want = (ref, [ref * 2, (ref * 3,)])
    assert compare((ref.clone(), [ref * 2, (ref * 3,)]), want).ok
    assert not compare((ref.clone(), [ref * 2, (ref * 3 + 1,)]), want).ok
    assert compare((ref.clone(), [ref * 2, ref * 3]), want).problem


def test_allclose_1e2_is_reported(ref):
    assert compare(ref * 1.001, ref).allclose_1e2
    far = compare(ref + 0.05, ref)
    assert not far.ok and not far.allclose_1e2
    assert far.max_abs_err == pytest.approx(0.05, rel=1e-3)


def test_half_precision_outputs_use_a_looser_tolerance(ref):
    want = ref.half()
    out = with_rel_noise(ref, 1e-3).half()
    assert compare(out, want, "fp32").ok


def test_python_scalars_are_compared():
    assert compare(3, 3).ok
    assert not compare(3, 4).ok
    assert compare(2.0, 2.0 * (1 + 1e-7)).ok
    assert not compare(2.0, 2.1).ok


def test_nan_python_float_does_not_match_a_finite_one():
    assert not compare(float("nan"), 1.0).ok


# ----------------------------------------------------------------------------- reward

def verdict(ok=True, eager=None, comp=None) -> Verdict:
    return Verdict(verdict=CORRECT if ok else INCORRECT, speedup_vs_eager=eager, speedup_vs_compile=comp)


@pytest.mark.parametrize("v,expected", [
    (verdict(ok=False, eager=3.0, comp=3.0), -1),
    (verdict(eager=1.06, comp=0.9), 2),
    (verdict(eager=1.06, comp=1.06), 3),
    (verdict(eager=1.04, comp=1.04), 1),
    (verdict(eager=1.05, comp=1.05), 1),  # "faster" is strictly more than 5%
    (verdict(eager=0.5, comp=1.5), 1),    # faster than compile only: not faster than eager
    (verdict(eager=2.0, comp=None), 2),   # compile baseline missing: at most 2
    (verdict(eager=None, comp=None), 1),
], ids=["incorrect", "eager_only", "eager_and_compile", "not_5pct", "exactly_5pct", "compile_only",
        "no_compile_baseline", "no_timing"])
def test_paper_reward(v, expected):
    assert paper_reward(v) == expected
    assert reward(v) == expected  # the default kind is the paper's


@pytest.mark.parametrize("verdict_name", [v for v in VERDICTS if v not in (CORRECT, "harness_error")])
def test_every_failure_verdict_gets_minus_one(verdict_name):
    v = Verdict(verdict=verdict_name, speedup_vs_eager=5.0, speedup_vs_compile=5.0)
    assert [REWARDS[k](v) for k in REWARDS] == [-1.0] * len(REWARDS)


def test_a_harness_error_gets_no_reward_of_any_kind():
    v = Verdict(verdict="harness_error", speedup_vs_eager=5.0, speedup_vs_compile=5.0)
    assert [REWARDS[k](v) for k in REWARDS] == [None] * len(REWARDS)


def test_speedup_rewards_prefer_the_compile_baseline():
    v = verdict(eager=4.0, comp=2.0)
    assert speedup_reward(v) == 2.0
    assert log_speedup_reward(v) == pytest.approx(math.log(2.0))
    assert reward(v, "speedup") == 2.0


def test_speedup_rewards_fall_back_to_eager_without_compile():
    v = verdict(eager=3.0, comp=None)
    assert speedup_reward(v) == 3.0
    assert log_speedup_reward(v) == pytest.approx(math.log(3.0))


def test_log_speedup_is_negative_when_slower():
    assert log_speedup_reward(verdict(eager=1.0, comp=0.5)) < 0


# ----------------------------------------------------------------------------- Verdict

REQUIRED_KEYS = {"verdict", "reasons", "flags", "max_abs_err", "rel_err", "ms", "eager_ms", "compile_ms",
                 "speedup_vs_eager", "speedup_vs_compile", "reward", "precision", "build_s", "eval_s", "log"}


def test_verdict_json_has_the_required_keys():
    d = json.loads(Verdict().to_json())
    assert REQUIRED_KEYS <= set(d), REQUIRED_KEYS - set(d)


def test_verdict_defaults_mean_failure():
    v = Verdict()
    assert v.verdict == RUNTIME_ERROR and not v.ok
    assert v.reward == -1 and paper_reward(v) == -1


def test_verdict_round_trips_through_json():
    v = Verdict(verdict=CORRECT, reasons=["fine"], flags=["excessive_speedup"], task="swish", rel_err=1e-7,
                max_abs_err=2e-7, ms=0.5, eager_ms=1.0, compile_ms=0.8, speedup_vs_eager=2.0,
                speedup_vs_compile=1.6, reward=3.0, precision={"mode": "fp32", "baseline": {"tf32": False}},
                build_s=1.2, eval_s=9.0, log="", timing={"n": 100}, num_trials=7)
    back = Verdict.from_dict(json.loads(v.to_json()))
    assert back == v


def test_verdict_from_dict_ignores_unknown_keys():
    v = Verdict.from_dict({"verdict": CORRECT, "reward": 2.0, "field_from_the_future": 1})
    assert v.ok and v.reward == 2.0


def test_reject_and_flag_do_not_duplicate():
    v = Verdict(verdict=CORRECT)
    v.reject("uses threads", "threads")
    v.reject("uses threads", "threads")
    assert v.verdict == REJECTED and v.reasons == ["uses threads"] and v.flags == ["threads"]


def test_an_episodes_outcome_reward_leaves_out_an_episode_that_ended_on_a_harness_error():
    from cuda_agent.sandbox.reward import outcome_reward

    best = Verdict(verdict=CORRECT, speedup_vs_eager=2.0, speedup_vs_compile=2.0).to_dict()
    harness = {"verdict": "harness_error"}
    assert outcome_reward(best, harness) == 3.0  # a correct solution keeps its reward
    assert outcome_reward(None, harness) is None  # nothing correct, and the harness failed last: left out
    assert outcome_reward(None, {"verdict": "incorrect"}) == -1.0
    assert outcome_reward(None, None) == -1.0  # never verified
    assert outcome_reward(best, None, "speedup") == 2.0


def _chunk_cases():
    torch.manual_seed(0)
    w = torch.randn(37, 3)
    nan_late, inf_both = w.clone(), w.clone()
    nan_late[-1, -1] = float("nan")
    inf_both[20, 1] = float("inf")
    return {
        "close": (w + 1e-6 * torch.randn(37, 3), w),
        "downgrade-sized": (w + 2e-3 * torch.randn(37, 3), w),
        "wrong": (w * 1.1, w),
        "nan only in the output's last chunk": (nan_late, w),
        "inf at the same place": (inf_both + 1e-7, inf_both),
        "inf missing": (w, inf_both),
        "all-zero reference": (torch.full((37, 3), 1e-9), torch.zeros(37, 3)),
        "non-contiguous": (w.t().contiguous().t() * (1 + 1e-6), w),
        "float64 past 1e154, 9 elements": (torch.tensor([1e200, -2e200, 3.0] * 3, dtype=torch.float64) * 2,
                                           torch.tensor([1e200, -2e200, 3.0] * 3, dtype=torch.float64)),
        "float64, exactly two chunks": (torch.arange(8, dtype=torch.float64) + 1e-9, torch.arange(8, dtype=torch.float64)),
        "empty": (torch.empty(0, 3), torch.empty(0, 3)),
        "fp16": (w.half() + 1e-3, w.half()),
    }


@pytest.mark.parametrize("case", list(_chunk_cases()))
def test_a_comparison_over_chunks_gives_the_whole_tensor_s_verdict_and_figures(monkeypatch, case):
    """compare() runs over chunks of CHUNK elements (a 6 GiB output's temporaries ran out of GPU memory):
    chunks of 4 elements (the last one partial) give what one chunk gives, to float64 rounding."""
    g, w = _chunk_cases()[case]
    whole = compare(g, w)
    monkeypatch.setattr(compare_module, "CHUNK", 4)
    chunked = compare(g, w)
    assert (chunked.ok, chunked.problem, chunked.allclose_1e2) == (whole.ok, whole.problem, whole.allclose_1e2)
    assert chunked.max_abs_err == whole.max_abs_err
    assert chunked.rel_err == pytest.approx(whole.rel_err, rel=1e-12, abs=0)


def test_a_float64_reference_above_1e154_still_tells_a_wrong_output_from_a_right_one():
    """Its sum of squares overflows: the norm came out inf, rel = inf / inf = NaN, and any output passed."""
    w = torch.tensor([1e200, -2e200, 3.0] * 3, dtype=torch.float64)
    assert not compare(w * 2, w).ok
    assert compare(w * (1 + 1e-12), w).ok


def test_complex_outputs_are_judged_on_both_parts():
    w = torch.complex(torch.randn(16), torch.randn(16))
    assert compare(w.clone(), w).ok
    assert not compare(torch.complex(w.real, -w.imag), w).ok  # the conjugate: same real part
    assert compare(w.conj(), w.conj().resolve_conj()).ok  # a lazily conjugated output is read as its values
