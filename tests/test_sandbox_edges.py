"""The numbers that decide verdicts and rewards, tested at their edges (pure CPU functions).

Each test pins one number or statistic so that a change to it fails a test: the reward's 5% margin,
the split between `incorrect` and `precision_downgrade`, the per-dtype tolerances, the medians of the
timing loop and of the harness gap, the signed trial inputs and the buffer-reuse plan, and what the
dispatch guard, the aliasing and the equality helpers report.
"""

import statistics

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.sandbox import guards, inputs, timing  # noqa: E402
from cuda_agent.sandbox.compare import (  # noqa: E402
    DOWNGRADE_CEILING, TOLERANCE, Comparison, compare, is_precision_downgrade, tolerance)
from cuda_agent.sandbox.reward import log_speedup_reward, paper_reward, speedup_reward  # noqa: E402
from cuda_agent.sandbox.verdict import CORRECT, Verdict  # noqa: E402


def with_rel_noise(ref: torch.Tensor, rel: float, seed: int = 1) -> torch.Tensor:
    noise = torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed), dtype=ref.dtype)
    return ref + noise * (rel * ref.norm() / noise.norm())


@pytest.fixture
def ref():
    return torch.randn(8192, generator=torch.Generator().manual_seed(0))


# ----------------------------------------------------------------------------- reward margins

def correct(eager=None, comp=None) -> Verdict:
    return Verdict(verdict=CORRECT, speedup_vs_eager=eager, speedup_vs_compile=comp)


@pytest.mark.parametrize("eager,comp,expected", [
    (2.0, 1.03, 2),    # far faster than eager, within 5% of compile: not "faster than compile"
    (2.0, 1.051, 3),   # just past the margin on both
    (1.051, 2.0, 3),
    (1.049, 2.0, 1),   # just inside the margin on eager: compile alone does not count
    (1.06, 1.049, 2),
])
def test_the_paper_reward_counts_faster_only_beyond_5_percent(eager, comp, expected):
    assert paper_reward(correct(eager, comp)) == expected


def test_a_correct_but_untimed_result_scores_zero_on_the_speedup_rewards():
    v = correct()
    assert speedup_reward(v) == 0.0
    assert log_speedup_reward(v) == 0.0


def test_the_speedup_reward_is_the_raw_ratio_not_a_tier():
    assert speedup_reward(correct(eager=1.5, comp=0.8)) == 0.8
    assert speedup_reward(correct(eager=0.7, comp=None)) == 0.7


# ----------------------------------------------------------------------------- tolerances

@pytest.mark.parametrize("dtype,passes,fails", [
    (torch.float16, 3e-3, 8e-3),    # tolerance 5e-3
    (torch.bfloat16, 2e-2, 5e-2),   # tolerance 3e-2
])
def test_half_precision_tolerances_at_their_edges(ref, dtype, passes, fails):
    want = ref.to(dtype)
    # noise added in float32, then rounded: the error is the noise plus the output dtype's rounding
    ok = compare(with_rel_noise(ref, passes).to(dtype), want, "fp32")
    bad = compare(with_rel_noise(ref, fails).to(dtype), want, "fp32")
    assert ok.ok, ok.worst
    assert not bad.ok and bad.problem is None, bad.worst
    assert bad.tolerance == tolerance(dtype, "fp32")


def test_the_tolerance_table():
    assert tolerance(torch.float32, "fp32") == 1e-4
    assert tolerance(torch.float32, "tf32") == 5e-3
    assert tolerance(torch.float64, "fp32") == 1e-7
    assert tolerance(torch.float16, "tf32") == 5e-3
    assert tolerance(torch.bfloat16, "fp32") == 3e-2
    assert len(TOLERANCE) == 5


@pytest.mark.parametrize("rel,expected", [
    (5e-5, "ok"),                    # fp32 rounding level
    (3e-4, "precision_downgrade"),   # TF32 level
    (4e-3, "precision_downgrade"),   # bf16 level, still under the ceiling
    (6e-3, "incorrect"),             # just over the ceiling (5e-3)
    (1e-2, "incorrect"),             # off by 1%: measured on the H200, must not pass as a downgrade
])
def test_the_incorrect_vs_precision_downgrade_split_in_strict_fp32(ref, rel, expected):
    # rounding-like error: each element off by the same relative amount (allclose(1e-2) holds throughout,
    # so only the ceiling decides)
    signs = torch.randint(0, 2, ref.shape, generator=torch.Generator().manual_seed(2)) * 2 - 1
    c = compare(ref * (1 + rel * signs), ref, "fp32")
    assert c.allclose_1e2 and c.rel_err == pytest.approx(rel, rel=1e-3)
    got = "ok" if c.ok else ("precision_downgrade" if is_precision_downgrade(c, "fp32") else "incorrect")
    assert got == expected, (rel, c.rel_err, c.allclose_1e2)


def test_the_downgrade_ceiling_is_5e_3():
    assert DOWNGRADE_CEILING == 5e-3


def test_a_downgrade_needs_strict_mode_and_allclose(ref):
    c = compare(with_rel_noise(ref, 3e-4), ref, "fp32")
    assert is_precision_downgrade(c, "fp32")
    assert not is_precision_downgrade(c, "tf32")  # tf32 mode compares against TF32 baselines
    far = compare(ref + 0.05, ref, "fp32")  # small relative L2 error but outside allclose(1e-2)
    assert not far.allclose_1e2
    assert not is_precision_downgrade(far, "fp32")
    shape = compare(ref.view(64, 128), ref, "fp32")
    assert not is_precision_downgrade(shape, "fp32")


def test_an_all_zero_reference_does_not_demand_exact_zeros():
    want = torch.zeros(1000)
    assert compare(torch.full((1000,), 1e-11), want).ok
    assert not compare(torch.full((1000,), 1e-3), want).ok


def test_rel_err_and_max_abs_err_report_the_worst_output(ref):
    c = compare((ref.clone(), ref + 1e-3), (ref, ref), "tf32")
    assert c.rel_err == pytest.approx(1e-3 * ref.numel() ** 0.5 / float(ref.norm()), rel=1e-3)
    assert c.max_abs_err == pytest.approx(1e-3, rel=1e-3)
    assert "out[1]" in c.worst


# ----------------------------------------------------------------------------- timing statistics

SKEWED = [1.0, 1.0, 1.1, 1.2, 9.0, 50.0, 1.05]  # a few slow outliers: median 1.1, min 1.0, mean >> 1


class _Ring:
    step = 0

    def next(self):
        self.step += 1
        return []


def test_run_timed_reports_medians_of_skewed_timings(monkeypatch):
    gpu = iter(SKEWED)
    wall = iter([g + 0.5 for g in SKEWED[::-1]])
    monkeypatch.setattr(timing, "time_once", lambda fn, ins, flush, after=None, issue=None: (next(gpu), next(wall)))
    r = timing.run_timed(None, _Ring(), None, n_iters=len(SKEWED))
    assert r["n"] == len(SKEWED) and r["gpu_ms"] == SKEWED
    assert r["gpu_median_ms"] == 1.1 == statistics.median(SKEWED)
    assert r["wall_median_ms"] == pytest.approx(1.6)


def test_the_trivial_gap_is_the_median_of_wall_minus_gpu(monkeypatch):
    pairs = iter([(1.0, 1.0 + d) for d in [0.02, 0.02, 0.03, 0.04, 5.0, 0.01, 0.03]] * 10)
    monkeypatch.setattr(timing, "time_once", lambda fn, ins, flush, after=None, issue=None: next(pairs))
    assert timing.gap_curve(torch.device("cpu"), None, n=7)[0][1] == pytest.approx(0.03)


def test_the_iteration_count_fills_rep_ms_within_its_bounds(monkeypatch):
    monkeypatch.setattr(timing, "time_once", lambda fn, ins, flush, after=None: (2.0, 2.1))
    n, per_call, _ = timing.plan_iterations(None, _Ring(), None, warmup_ms=10.0, rep_ms=100.0,
                                            min_iters=10, max_iters=2000)
    assert per_call == 2.0 and n == 50
    n, _, _ = timing.plan_iterations(None, _Ring(), None, 10.0, rep_ms=1.0, min_iters=10, max_iters=2000)
    assert n == 10
    n, _, _ = timing.plan_iterations(None, _Ring(), None, 10.0, rep_ms=1e6, min_iters=10, max_iters=300)
    assert n == 300


@pytest.mark.parametrize("per_call, window, expected", [
    (2.0, 1000.0, 50),    # short kernel: rep_ms decides, the window does not bite
    (50.0, 1000.0, 10),   # 50 ms kernel: min_iters still fits the 1 s window
    (200.0, 1000.0, 5),   # 200 ms kernel: 5 calls fill the window, below min_iters
    (400.0, 1000.0, 3),   # longer than a third of the window: the floor of three calls
    (200.0, None, 10),    # no window: min_iters as before
])
def test_the_timed_window_is_bounded_for_long_kernels(per_call, window, expected):
    assert timing.iteration_count(per_call, rep_ms=100.0, min_iters=10, max_iters=2000,
                                  max_window_ms=window) == expected


def test_plan_iterations_applies_the_window(monkeypatch):
    monkeypatch.setattr(timing, "time_once", lambda fn, ins, flush, after=None: (200.0, 200.1))
    n, per_call, warm = timing.plan_iterations(None, _Ring(), None, warmup_ms=10.0, rep_ms=200.0, min_iters=10,
                                               max_iters=2000, max_window_ms=1000.0)
    assert (n, per_call) == (5, 200.0)
    assert warm["warmup_ms"] <= 1000.0 + 5 * 200.0  # the warm-up keeps its own bound (one window over at most)


def test_refresh_scales_stay_in_range_and_never_repeat():
    scales = [timing.refresh_scale(s) for s in range(1, 2001)]
    assert all(0.5 <= s < 1.0 for s in scales)
    assert len(set(scales)) == len(scales)
    assert min(abs(a - b) for a, b in zip(scales, scales[1:])) > 0.05  # consecutive steps far apart


def test_the_input_ring_rotates_and_rewrites_values_in_place():
    sets = [[torch.ones(4), torch.arange(3)], [torch.full((4,), 2.0), torch.arange(3)]]
    ring = timing.InputRing(sets, torch.device("cpu"))
    a = ring.next()
    b = ring.next()
    c = ring.next()
    assert a[0] is c[0] and a[0] is not b[0]  # two sets, in turn, same buffers
    assert torch.equal(b[1], torch.arange(3))  # integer tensors are never rescaled
    assert torch.allclose(c[0], torch.ones(4) * timing.refresh_scale(3))
    assert not torch.equal(sets[0][0], c[0]) and torch.equal(sets[0][0], torch.ones(4))  # never the caller's


def test_output_checksums_tell_outputs_apart():
    cs = timing.OutputChecksum(seed=3, device=torch.device("cpu"))
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    same = cs(x.clone())
    assert torch.equal(cs(x), same)
    assert same[1].item() == pytest.approx(float(x.double().dot(x.double())))
    other = cs(x * 1.01)
    assert abs(float(other[0] - same[0])) > 1e-3
    assert torch.equal(timing.OutputChecksum(3, torch.device("cpu")).weights(1000), cs.weights(1000))
    assert not torch.equal(timing.OutputChecksum(4, torch.device("cpu")).weights(1000), cs.weights(1000))


# ----------------------------------------------------------------------------- trial inputs

class _NonNegTask:
    @staticmethod
    def get_inputs():
        return [torch.rand(64, 64), torch.randint(0, 10, (5,)), 3.5]


def test_signed_inputs_are_standard_normal_where_the_task_draws_non_negative():
    task_kind = inputs.draw(_NonNegTask, seed=1, kind=inputs.TASK)
    signed = inputs.draw(_NonNegTask, seed=1, kind=inputs.SIGNED)
    assert (task_kind[0] >= 0).all()
    x = signed[0]
    assert x.shape == task_kind[0].shape and x.dtype == task_kind[0].dtype
    assert (x < 0).float().mean().item() == pytest.approx(0.5, abs=0.05)
    assert abs(x.mean().item()) < 0.05 and x.std().item() == pytest.approx(1.0, abs=0.05)
    assert torch.equal(signed[1], task_kind[1]) and signed[2] == 3.5  # integers and scalars kept


def test_draws_are_reproducible_per_seed_and_differ_across_seeds():
    a, b = inputs.draw(_NonNegTask, 5), inputs.draw(_NonNegTask, 5)
    assert torch.equal(a[0], b[0])
    assert not torch.equal(a[0], inputs.draw(_NonNegTask, 6)[0])
    assert not torch.equal(inputs.draw(_NonNegTask, 5, inputs.SIGNED)[0],
                           inputs.draw(_NonNegTask, 6, inputs.SIGNED)[0])


class _NamedDeviceTask:
    """A task that makes one input on a device it names itself, and draws more randoms than _NonNegTask."""

    @staticmethod
    def get_inputs():
        torch.rand(1000)  # consumed and dropped: the signed draw must not depend on it
        return [torch.rand(64, 64, device="cpu"), torch.randint(0, 10, (5,)), 3.5]


def test_a_draw_lands_on_the_device_asked_for_even_where_the_task_names_another():
    """The reference worker draws on the GPU: get_inputs() runs with that device as the default, and a
    tensor the task made on a device it named is moved there too (the meta device stands in for the GPU; it
    has no generator, so the signed kind, which needs one on the device, is the GPU suite's to check)."""
    drawn = inputs.draw(_NonNegTask, 3, inputs.TASK, device="meta")
    assert [x.device.type for x in drawn[:2]] == ["meta", "meta"]
    named = inputs.draw(_NamedDeviceTask, 3, inputs.TASK, device="meta")
    assert [x.device.type for x in named[:2]] == ["meta", "meta"]


def test_signed_inputs_depend_on_the_seed_and_shapes_alone():
    """The signed values come from a generator of their own, seeded from the evaluator's seed: not from
    whatever the task's own get_inputs() drew before them, nor from its values."""
    a = inputs.draw(_NonNegTask, 11, inputs.SIGNED)
    b = inputs.draw(_NamedDeviceTask, 11, inputs.SIGNED)
    assert torch.equal(a[0], b[0])
    task_a, task_b = inputs.draw(_NonNegTask, 11), inputs.draw(_NamedDeviceTask, 11)
    assert not torch.equal(task_a[0], task_b[0])  # the task draws do differ: the test means something


class _HalfTask:
    @staticmethod
    def get_inputs():
        return [torch.rand(32, 32).half(), torch.rand(8, dtype=torch.bfloat16), torch.rand(4, dtype=torch.float64)]


def test_signed_inputs_keep_each_tensors_dtype():
    signed = inputs.draw(_HalfTask, 4, inputs.SIGNED)
    assert [x.dtype for x in signed] == [torch.float16, torch.bfloat16, torch.float64]
    assert all((x < 0).any() for x in signed)


def test_tiny_sets_rotate_as_the_budget_allows():
    assert inputs.rotation_sets(1, 4, 1) == 4 and inputs.rotation_sets(1, 3, 0) == 3
    assert inputs.rotation_sets(2, 4, 1) == 2 and inputs.rotation_sets(3, 4, 1) == 1


def test_the_trial_plan_alternates_kinds_and_reuses_buffers_from_the_third_trial():
    assert inputs.trial_plan(5) == [("task", False), ("signed", False), ("task", True), ("signed", True),
                                    ("task", True)]


def test_sizes_of_nested_outputs():
    obj = (torch.empty(10, dtype=torch.float32), [torch.empty(3, dtype=torch.float16), 7])
    assert inputs.nbytes(obj) == 46
    assert inputs.leaf_sizes(obj) == [40, 6]
    assert inputs.nbytes({"a": obj, "b": torch.empty(2, dtype=torch.int64)}) == 62  # a dict's values count too


class _TransposedTask:
    @staticmethod
    def get_inputs():
        return [torch.rand(8, 4).t(), torch.rand(6, 6)[:, ::2]]


def test_drawn_inputs_are_contiguous_whatever_the_task_returns():
    """Kernels index their inputs as dense row-major buffers: every drawn set is made contiguous, as
    KernelBench's own inputs are, whatever views the task's get_inputs() returns."""
    for kind in (inputs.TASK, inputs.SIGNED):
        drawn = inputs.draw(_TransposedTask, 2, kind)
        assert [tuple(x.shape) for x in drawn] == [(4, 8), (6, 3)] and all(x.is_contiguous() for x in drawn), kind


# ----------------------------------------------------------------------------- guards

def test_the_dispatch_guard_records_compute_and_allows_data_movement():
    x = torch.randn(8)
    with guards.TorchOpGuard() as g:
        y = torch.empty_like(x)
        y.copy_(x)
        x.view(2, 4).transpose(0, 1).contiguous()
    assert g.violations == []
    with guards.TorchOpGuard() as g:
        torch.sigmoid(x)
        x * 2
        torch.sigmoid(x)
    assert g.violations == ["aten.sigmoid.default", "aten.mul.Tensor"]  # each once, in order


def test_the_dispatch_guard_records_dtype_and_device_changes_through_copies():
    x = torch.randn(8)
    with guards.TorchOpGuard() as g:
        x.to(torch.float16)
    assert any("dtype conversion" in v for v in g.violations), g.violations
    with guards.TorchOpGuard() as g:
        torch.empty(8, dtype=torch.float64).copy_(x)
    assert any("dtype conversion" in v for v in g.violations), g.violations
    with guards.TorchOpGuard() as g:
        x.to("meta")
    assert any("between devices" in v for v in g.violations), g.violations


def test_overlapping_storages_are_seen_and_empty_ones_are_not():
    x = torch.randn(100)
    assert guards.overlaps(guards.storages(x[10:20]), guards.storages(x))
    assert guards.overlaps(guards.storages([x.view(10, 10)]), guards.storages((torch.empty(1), x)))
    assert not guards.overlaps(guards.storages(x.clone()), guards.storages(x))
    assert not guards.overlaps([(5, 5)], [(0, 10)])  # zero-length ranges overlap nothing
    assert guards.overlaps([(0, 10)], [(9, 20)]) and not guards.overlaps([(0, 10)], [(10, 20)])
    assert guards.storages({"a": x}) == guards.storages(x)


def test_bitwise_equality_treats_nan_as_a_bit_pattern():
    x = torch.tensor([1.0, float("nan")])
    assert guards.bitwise_equal(x, x.clone())
    assert not guards.bitwise_equal(x, torch.tensor([1.0, 2.0]))
    assert not guards.bitwise_equal(x, x.double())
    assert not guards.bitwise_equal(x, x.view(2, 1))
    assert guards.bitwise_equal(torch.empty(0), torch.empty(0))
    y = torch.zeros(4)
    y[3] = -0.0
    assert not guards.bitwise_equal(torch.zeros(4), y)  # -0.0 == 0.0 numerically, not bitwise


def test_thread_starts_are_counted_even_when_the_thread_ends_at_once():
    import threading

    count = guards.count_thread_starts()
    before = count()
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    assert count() == before + 1


# --- compare: what mutation testing found unpinned (benchmarks/mutation.py) -------------------------------

def test_the_downgrade_ceiling_itself_still_counts_as_a_downgrade():
    c = Comparison(ok=False, rel_err=DOWNGRADE_CEILING, tolerance=1e-4, allclose_1e2=True)
    assert is_precision_downgrade(c, "fp32")
    assert not is_precision_downgrade(Comparison(ok=False, rel_err=DOWNGRADE_CEILING * 1.001, tolerance=1e-4,
                                                 allclose_1e2=True), "fp32")


def test_a_dtype_without_its_own_tolerance_gets_the_strict_default():
    assert tolerance(torch.complex64, "fp32") == 1e-4


def test_integer_mismatches_fail_with_an_infinite_error():
    c = compare(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))
    assert c.ok is False and c.rel_err == float("inf") and c.worst == "out: 1 of 3 elements differ"


def test_half_precision_outputs_are_compared_in_fp32_arithmetic():
    # in fp16 arithmetic the difference (1.3e5) would overflow to inf
    c = compare(torch.tensor([65000.0], dtype=torch.float16), torch.tensor([-65000.0], dtype=torch.float16))
    assert c.max_abs_err == 2 * 64992.0 and c.problem is None  # 65000 is 64992 in fp16


def test_double_outputs_are_compared_in_double_arithmetic():
    # in fp32 both round to 1.0 and the error would vanish
    c = compare(torch.tensor([1.0 + 1e-10], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64))
    assert 0.5e-10 < c.rel_err < 2e-10 and c.ok


def test_an_infinity_where_the_reference_is_finite_is_a_problem():
    c = compare(torch.tensor([float("inf"), 1.0]), torch.tensor([1.0, 1.0]))
    assert c.problem is not None and c.rel_err == float("inf") and c.ok is False


def test_the_non_finite_message_counts_positions_and_the_reference_s_nan_and_inf():
    nan, inf = float("nan"), float("inf")
    # position 1: -inf for inf; position 2: inf for a finite value; positions 0 and 3 agree
    c = compare(torch.tensor([nan, -inf, inf, 2.0]), torch.tensor([nan, inf, 1.0, 2.0]))
    assert c.problem == "out: non-finite values differ from the reference (2 positions; reference has 2 NaN/Inf)"
    assert c.rel_err == float("inf")
    c = compare(torch.tensor([nan, 1.0]), torch.tensor([1.0, nan]))  # NaN moved: both positions
    assert c.problem == "out: non-finite values differ from the reference (2 positions; reference has 1 NaN/Inf)"
    c = compare(torch.tensor([-inf, 1.0, 2.0]), torch.tensor([inf, 1.0, 2.0]))  # an infinity of the wrong sign
    assert c.problem == "out: non-finite values differ from the reference (1 positions; reference has 1 NaN/Inf)"


@pytest.mark.parametrize("out, ref, message", [
    ((torch.ones(2), torch.ones(2)), (torch.ones(2),), "output structure differs: expected tuple of 1, got tuple of 2"),
    (torch.ones(4), (torch.ones(4),), "output structure differs: expected tuple of 1, got Tensor(4,) torch.float32"),
    ((torch.ones(2),), [torch.ones(2)], "out: expected list of 1, got tuple of 1"),
    (1, torch.ones(2), "out: expected a tensor, got int"),
    ("<unsupported output type foo.Bar>", torch.ones(2), "out: expected a tensor, got <unsupported output type foo.Bar>"),
])
def test_structure_problems_name_what_was_expected_and_what_came(out, ref, message):
    assert compare(out, ref).problem == message


@pytest.mark.parametrize("out, ref, message", [
    (torch.ones(2), (), "out: expected tuple of 0, got Tensor(2,) torch.float32"),
    (1, 1.0, "out: expected float, got int"),
])
def test_a_container_or_scalar_of_the_wrong_kind_is_a_problem(out, ref, message):
    c = compare(out, ref)
    assert c.problem == message and c.ok is False


def test_python_float_outputs_at_their_edges():
    nan = float("nan")
    assert compare(nan, nan).ok is True  # NaN in the same place matches
    c = compare(1.0, nan)
    assert c.ok is False and c.rel_err == float("inf")
    assert compare((nan, 1.0), (nan, 2.0)).ok is False  # a matching NaN does not end the comparison
    c = compare(1000.01, 1000.0)  # relative, not absolute: 1e-5
    assert c.ok and c.rel_err == pytest.approx(1e-5, rel=1e-3)
    assert compare(2e-7, 0.0).ok is False  # a zero reference: the error is taken against 1e-6
    assert compare(3.0, 1.0).max_abs_err == 2.0
    assert compare(10001.0, 10000.0).ok  # exactly at the tolerance (1/1e4 == 1e-4): still correct
    assert compare(1.001, 1.0, "tf32").ok and not compare(1.001, 1.0, "fp32").ok


def test_tensor_comparison_edges():
    inf = float("inf")
    c = compare(torch.tensor([inf, inf]), torch.tensor([inf, inf]))  # nothing finite to compare
    assert c.ok and c.max_abs_err == 0.0 and c.rel_err == 0.0
    assert compare(torch.tensor([inf, 2.0]), torch.tensor([inf, 1.0])).ok is False  # finite part wrong
    w = torch.full((4,), 1e30)  # norms in float64: in fp32 they overflow and the error would vanish
    c = compare(w * (1 + 1e-3), w)
    assert c.ok is False and c.rel_err == pytest.approx(1e-3, rel=1e-2)
    assert compare(torch.full((100,), 1e-5), torch.zeros(100)).ok is False  # zeros: 1e-6 RMS floor
    assert compare(torch.tensor([1.2e-10]), torch.tensor([0.0])).ok is False  # one element: floor 1e-6
    assert compare(torch.tensor([10001.0]), torch.tensor([10000.0])).ok  # exactly at the tolerance
    c = compare(torch.tensor([1.05]), torch.tensor([1.0]))
    assert c.allclose_1e2 is False and c.ok is False
    a, b = torch.tensor([1.1]), torch.tensor([1.0])
    assert compare((a, a), (b, b)).worst.startswith("out[0]:")  # ties name the first output


def test_faster_than_compile_means_more_than_5_percent():
    v = Verdict(verdict=CORRECT, speedup_vs_eager=2.0, speedup_vs_compile=1.05)
    assert paper_reward(v) == 2


def test_a_candidate_importing_dynamo_changes_nothing_the_integrity_snapshot_watches():
    """The candidate's worker no longer imports dynamo before its snapshot (it takes seconds, and the worker
    never compiles): that holds only while importing and running dynamo leaves every watched function as it
    was, or an honest candidate that uses it would look like one that tampered with the harness."""
    import subprocess
    import sys

    code = """
import sys
import torch
from cuda_agent.sandbox import guards, share, timing, worker
assert "torch._dynamo" not in sys.modules, "dynamo is imported before the snapshot: the check would mean nothing"
guards.settle_harness(torch.device("cpu"))
own = (guards, timing, share, worker)
snap = guards.integrity_snapshot(own)
import torch._dynamo
f = torch.compile(lambda x: torch.relu(x) * 2, backend="eager")
f(torch.randn(8))
print(guards.integrity_diff(snap, guards.integrity_snapshot(own)))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout


def test_set_precision_sets_every_switch_whatever_was_set_before():
    """The worker's precision mode (strict FP32 or TF32) is set outright, not only from torch's defaults."""
    import torch

    from cuda_agent.sandbox.worker import precision_state, set_precision

    before = precision_state()
    try:
        set_precision("tf32")
        assert precision_state() == {"matmul_allow_tf32": True, "cudnn_allow_tf32": True,
                                     "float32_matmul_precision": "high"}
        torch.set_float32_matmul_precision("medium")
        set_precision("fp32")
        assert precision_state() == {"matmul_allow_tf32": False, "cudnn_allow_tf32": False,
                                     "float32_matmul_precision": "highest"}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before["matmul_allow_tf32"]
        torch.backends.cudnn.allow_tf32 = before["cudnn_allow_tf32"]
        torch.set_float32_matmul_precision(before["float32_matmul_precision"])
