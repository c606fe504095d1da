"""The sandbox on a real GPU: honest kernels pass, wrong and crashing ones get the right verdict,
and every cheat is rejected, found incorrect, or neutralized (its reported time made honest).

Cheats that a static rule catches are evaluated a second time with the static rules off, to show
that the dynamic defense behind each one holds on its own.
"""

import pytest

from cuda_agent.sandbox import SandboxConfig, evaluate, load_solution, timing
from cuda_agent.tasks import load_task

from ..conftest import EXAMPLES, SOLUTIONS, TASKS, clocks

pytestmark = pytest.mark.gpu

SWISH = EXAMPLES / "swish" / "task.py"
FAILED = {"incorrect", "rejected", "runtime_error", "timeout", "compile_error"}


def run(cache_dir, task, solution, **overrides):
    cfg = dict(cache_dir=cache_dir, rep_ms=50.0, warmup_ms=10.0, run_timeout_s=60.0)
    cfg.update(overrides)
    v = evaluate(load_task(task), load_solution(solution) if solution else None, SandboxConfig(**cfg))
    print(f"\n{getattr(solution, 'name', solution)}: {v.verdict} reward={v.reward} ms={v.ms} eager={v.eager_ms} "
          f"compile={v.compile_ms} rel_err={v.rel_err} flags={v.flags}\n  eval_s={v.eval_s} build_s={v.build_s} "
          f"baseline_s={v.baseline_s} cached={v.baseline_cached} compile_s={v.timing.get('compile_s')}\n  clocks={clocks(v)}\n"
          f"  reasons={v.reasons}\n  log={v.log[:600]}")
    return v


HONEST = [
    ("elementwise (example, workspace)", SWISH, EXAMPLES / "swish" / "solution"),
    ("elementwise (single file, load_inline)", SWISH, SOLUTIONS / "honest_swish_inline.py"),
    ("reduction", TASKS / "row_sum.py", SOLUTIONS / "honest_row_sum"),
    ("gemm cublas + fused epilogue", TASKS / "linear_relu.py", SOLUTIONS / "honest_linear_relu"),
    ("normalization", TASKS / "layer_norm.py", SOLUTIONS / "honest_layer_norm"),
]


@pytest.mark.timing
@pytest.mark.parametrize("label,task,solution", HONEST, ids=[h[0] for h in HONEST])
def test_honest_kernels_pass(cache_dir, label, task, solution):
    v = run(cache_dir, task, solution)
    assert v.verdict == "correct", (label, v.reasons, v.log)
    assert v.reward >= 1
    assert v.num_trials >= 5 + 2  # five trials before timing, two re-checks after
    assert v.ms and v.eager_ms and v.compile_ms
    assert v.precision["baseline"]["matmul_allow_tf32"] is False
    assert not v.flags, v.flags
    # confined (the default): the candidate shared the reference's PID namespace for CUDA IPC, under its
    # process guard; a correct verdict means the inputs and outputs crossed the jail
    assert v.confinement["pid"].startswith("shared") and v.confinement["process_guard"]["enforced"], v.confinement


@pytest.mark.timing
def test_honest_fused_elementwise_beats_eager(cache_dir):
    v = run(cache_dir, SWISH, EXAMPLES / "swish" / "solution")
    assert v.verdict == "correct" and v.speedup_vs_eager > 1.05 and v.reward >= 2


FAILURES = [
    ("wrong result", SWISH, "wrong_swish", "incorrect"),
    ("illegal memory access", SWISH, "crash_illegal_access", "runtime_error"),
    ("segfault in host code", SWISH, "crash_segfault", "runtime_error"),
    ("sys.exit in forward", SWISH, "crash_sys_exit", "runtime_error"),
    ("hang", SWISH, "hang_kernel", "timeout"),
    ("compile error", SWISH, "compile_error", "compile_error"),
]


@pytest.mark.parametrize("label,task,solution,verdict", FAILURES, ids=[f[0] for f in FAILURES])
def test_failures_get_the_right_verdict(cache_dir, label, task, solution, verdict):
    v = run(cache_dir, task, SOLUTIONS / solution, run_timeout_s=30.0)
    assert v.verdict == verdict, (label, v.reasons, v.log)
    assert v.reward == -1
    if verdict == "compile_error":
        assert "kernels/ew.cu(4)" in v.log, v.log  # file:line kept
    if verdict == "runtime_error" and "illegal" in label:
        assert "illegal memory access" in (v.log + " ".join(v.reasons))


# (class of cheat, task, solution, verdict, the flag that must fire (None: none may), where the first reason
# must come from: "static" (a source line, "file:LINE: [rule]"), or the prefix of the dynamic check's reason)
STATIC = "static"
CHEATS = [
    ("torch fallback in forward", SWISH, "cheat_torch_fallback", "rejected", "torch_compute", STATIC),
    ("torch compute hidden in a C++ binding", TASKS / "row_sum.py", "cheat_hidden_aten", "rejected",
     "torch_compute", "trial 0 (task inputs)"),
    ("delegates to the reference Model", SWISH, "cheat_delegate", "rejected", "delegates_to_reference", STATIC),
    ("try/except fallback to torch", SWISH, "cheat_try_except", "rejected", "fallback", STATIC),
    ("monkey-patches the timer", SWISH, "cheat_monkeypatch_timer", "rejected", "monkey_patch", STATIC),
    ("threads", SWISH, "cheat_thread", "rejected", "threads", STATIC),
    # trial 1 already: its new input set is shared from the block trial 0's set was freed into (the candidate
    # lets go of a set the next trial does not reuse), so it arrives at trial 0's address with new values
    # (H200, this session); trial 2 writes into the same buffers on purpose
    ("output cache keyed by pointer", SWISH, "cheat_pointer_cache", "rejected", "output_reused",
     "trial 1 (signed inputs)"),
    ("output cache keyed by pointer, handing back copies", SWISH, "cheat_pointer_cache_copy", "incorrect", None,
     "trial 1 (signed inputs)"),
    ("skips work while timed", SWISH, "cheat_skip_while_timed", "incorrect", "timed_outputs_wrong", ""),
    ("side stream", SWISH, "cheat_side_stream", "rejected", "side_stream", STATIC),
    ("lazy tensor subclass", SWISH, "cheat_lazy_tensor", "rejected", "lazy_tensor", STATIC),
    ("mutates its input and returns it", SWISH, "cheat_mutate_input", "rejected", "input_mutated",
     "trial 0 (task inputs)"),
    ("mutates its input, returns a fresh output", SWISH, "cheat_mutate_input_fresh", "rejected", "input_mutated",
     "trial 0 (task inputs)"),
    ("relies on freed memory", SWISH, "cheat_freed_memory", "incorrect", None, "trial 0 (task inputs)"),
    ("identity on non-negative inputs", TASKS / "relu_nonneg.py", "cheat_identity_nonneg", "incorrect", None,
     "trial 1 (signed inputs)"),
    ("TF32 against a strict-FP32 baseline", TASKS / "linear_relu.py", "cheat_tf32_gemm", "rejected",
     "precision_downgrade", "trial 0 (task inputs)"),
]
EXACT_FLAGS = {"cheat_mutate_input": ["output_aliases_input", "input_mutated"],
               "cheat_mutate_input_fresh": ["input_mutated"]}
"""Cheats whose whole flag list is pinned: the fresh-output variant must trip the input check alone."""


def _first_reason_from(v, where: str) -> None:
    static = [r for r in v.reasons if ".py:" in r.split(" ")[0] or ".cpp:" in r.split(" ")[0] or ".cu:" in r.split(" ")[0]]
    if where == STATIC:
        assert static, v.reasons
    else:
        assert not static, ("a static finding decided a verdict that must come from a trial", v.reasons)
        assert v.reasons and v.reasons[0].startswith(where), v.reasons


@pytest.mark.parametrize("label,task,solution,verdict,flag,where", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheats_are_caught_by_the_defense_meant_for_them(cache_dir, label, task, solution, verdict, flag, where):
    v = run(cache_dir, task, SOLUTIONS / solution)
    assert v.verdict == verdict, (label, v.verdict, v.flags, v.reasons)
    if solution in EXACT_FLAGS:
        assert v.flags == EXACT_FLAGS[solution], v.flags
    elif flag is None:
        assert not v.flags, v.flags
    else:
        assert flag in v.flags, (label, v.flags, v.reasons)
    _first_reason_from(v, where)
    assert v.reward == -1


# Static rules off: the dynamic layer alone must still catch these, by the defense named.
DYNAMIC_ONLY = [
    ("torch fallback", SWISH, "cheat_torch_fallback", "torch_compute", "trial 0 (task inputs)"),
    ("try/except fallback", SWISH, "cheat_try_except", "torch_compute", "trial 0 (task inputs)"),
    ("monkey-patched timer", SWISH, "cheat_monkeypatch_timer", "monkey_patch",
     "the harness's own functions or settings were changed"),
    ("threads", SWISH, "cheat_thread", "threads", "trial 0 (task inputs)"),
    ("lazy tensor", SWISH, "cheat_lazy_tensor", "lazy_output", "trial 0 (task inputs)"),
]


@pytest.mark.parametrize("label,task,solution,flag,where", DYNAMIC_ONLY, ids=[d[0] for d in DYNAMIC_ONLY])
def test_dynamic_defenses_hold_without_static_rules(cache_dir, label, task, solution, flag, where):
    v = run(cache_dir, task, SOLUTIONS / solution, static_rules=False)
    assert v.verdict == "rejected" and v.flags == [flag], (label, v.verdict, v.flags, v.reasons)
    _first_reason_from(v, where)


@pytest.mark.timing
def test_side_stream_work_is_charged_without_static_rules(cache_dir):
    """The side-stream kernel launches 21 times the honest kernel's work where the events cannot see it.
    Neutralized means its reward is no better than the honest kernel's and its time shows the work."""
    honest = run(cache_dir, SWISH, EXAMPLES / "swish" / "solution")
    v = run(cache_dir, SWISH, SOLUTIONS / "cheat_side_stream", static_rules=False)
    assert honest.verdict == "correct" and honest.reward >= 2, (honest.reasons, honest.flags)
    assert v.verdict in ("correct", "rejected"), v.reasons
    if v.verdict == "correct":
        assert "timing_mismatch" in v.flags or "timer_mismatch" in v.flags, v.flags
        assert v.ms > 5 * honest.ms, (v.ms, honest.ms)  # 21x the work: far slower than the honest kernel
        assert v.reward < honest.reward and v.speedup_vs_eager < 1.0, (v.reward, v.speedup_vs_eager)


def test_tf32_kernel_is_fair_in_tf32_mode(cache_dir):
    v = run(cache_dir, TASKS / "linear_relu.py", SOLUTIONS / "cheat_tf32_gemm", precision="tf32")
    assert v.verdict == "correct", v.reasons
    assert v.precision["baseline"]["matmul_allow_tf32"] is True


@pytest.mark.timing
def test_calibration_reference_scores_one(cache_dir):
    v = run(cache_dir, SWISH, None, calibrate=True, rep_ms=200.0)
    assert v.verdict == "correct", v.reasons
    assert 0.9 < v.speedup_vs_eager < 1.1


def test_a_reference_that_dies_compiling_is_replaced_and_the_candidate_loads_the_new_ones_weights(cache_dir):
    """torch.compile kills the reference's worker; a fresh one times eager and exports its weights, which the
    candidate (the task's own Model) must load: the dead worker's CUDA IPC handles cannot be opened."""
    v = run(cache_dir, TASKS / "compile_kills_reference.py", None, calibrate=True, use_baseline_cache=False)
    assert v.verdict == "correct" and v.compile_ms is None and v.eager_ms, (v.verdict, v.reasons, v.log)
    assert any(r.startswith("torch.compile baseline unavailable") for r in v.reasons), v.reasons


@pytest.mark.timing
def test_second_evaluation_reads_cached_baselines_and_build(cache_dir):
    run(cache_dir, TASKS / "row_sum.py", SOLUTIONS / "honest_row_sum")
    v = run(cache_dir, TASKS / "row_sum.py", SOLUTIONS / "honest_row_sum")
    assert v.baseline_cached and v.baseline_s < 0.1
    assert v.build_s < 0.3


def test_work_skipped_only_while_timed_is_caught_by_the_timed_output_checksums(cache_dir):
    v = run(cache_dir, SWISH, SOLUTIONS / "cheat_skip_while_timed")
    assert v.verdict == "incorrect" and "timed_outputs_wrong" in v.flags, (v.verdict, v.flags, v.reasons)


def test_honest_kernel_passes_the_timed_output_check(cache_dir):
    v = run(cache_dir, TASKS / "linear_relu.py", SOLUTIONS / "honest_linear_relu")
    assert v.verdict == "correct", v.reasons
    # host load (the suite runs -n 8) can call for a second timing attempt; the outputs of both are checked
    iters = v.timing["retimed"]["attempt_iters"] if "retimed" in v.timing else [v.timing["iters"]]
    assert v.timing["timed_outputs_checked"] == sum(iters) > 0, v.timing
    # each worker reports its own GPU's peak (the memory ledger's fit data and the reports read it)
    mem = v.timing["memory"]
    assert mem["reference_peak_gpu_mb"] > 0 and mem["candidate_peak_gpu_mb"] > 0, mem
    # clock 1's allowance: the candidate's worker measured the harness gap at each spin length, in order
    curve = v.timing["gap_curve"]
    assert len(curve) == 1 + len(timing.GAP_LADDER_MS), curve
    assert curve[0][0] < 0.1 and curve[-1][0] > 2.0, curve  # a trivial call, and spins up to about 3 ms
