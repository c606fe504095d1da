"""The bench's numbers, checked against values computed by hand."""

import math

import pytest

from cuda_agent.bench.metrics import (
    Attempt,
    fast_p,
    faster_rate,
    geomean,
    geomean_speedup,
    pass_rate,
    summarize,
    summarize_levels,
)

# Five attempts: three correct (speed-ups vs eager 2.0, 0.5, 1.03; vs compile 1.5, 0.25, None),
# one correct with no compile baseline is the third; two failures.
A = [Attempt(True, 2.0, 1.5), Attempt(True, 0.5, 0.25), Attempt(True, 1.03, None),
     Attempt(False, None, None), Attempt(False, 9.0, 9.0)]  # a failure's speed-up never counts


def test_pass_rate_is_correct_over_all_attempts():
    assert pass_rate(A) == pytest.approx(3 / 5)
    assert pass_rate([]) == 0.0


def test_faster_rate_uses_the_papers_five_percent_margin_over_all_attempts():
    # vs eager: 2.0 > 1.05 only (1.03 is not); the failed 9.0 does not count
    assert faster_rate(A, "eager") == pytest.approx(1 / 5)
    # strict: 2.0 and 1.03 are > 1.0
    assert faster_rate(A, "eager", 1.0) == pytest.approx(2 / 5)
    # vs compile: 1.5 only; the attempt without a compile baseline is not faster
    assert faster_rate(A, "compile") == pytest.approx(1 / 5)


def test_geomean_by_hand():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([0.5, 2.0]) == pytest.approx(1.0)
    assert geomean([]) is None
    with pytest.raises(ValueError):
        geomean([1.0, 0.0])


def test_geomean_speedup_is_over_correct_attempts_only():
    # eager: (2.0 * 0.5 * 1.03) ** (1/3) = 1.03 ** (1/3)
    assert geomean_speedup(A, "eager") == pytest.approx(1.03 ** (1 / 3))
    # compile: the attempt without a compile baseline is left out: sqrt(1.5 * 0.25)
    assert geomean_speedup(A, "compile") == pytest.approx(math.sqrt(0.375))
    assert geomean_speedup([Attempt(False, 3.0, 3.0)], "eager") is None


def test_fast_p_is_kernelbenchs_correct_and_faster_than_p_over_all():
    assert fast_p(A, 0.0) == pytest.approx(3 / 5)  # every correct attempt with a speed-up
    assert fast_p(A, 0.5) == pytest.approx(2 / 5)  # strictly greater: 0.5 is out
    assert fast_p(A, 1.0) == pytest.approx(2 / 5)
    assert fast_p(A, 1.5) == pytest.approx(1 / 5)
    assert fast_p(A, 2.0) == pytest.approx(0.0)
    assert fast_p(A, 1.0, "compile") == pytest.approx(1 / 5)
    assert fast_p([], 1.0) == 0.0


def test_summary_of_one_split():
    s = summarize("Level 1", A, ["correct", "correct", "correct", "compile_error", "incorrect"])
    assert (s.attempts, s.correct) == (5, 3)
    assert s.faster_than_eager_strict == pytest.approx(0.4)
    assert s.fast_p_eager[1.5] == pytest.approx(0.2)
    assert s.verdicts == {"correct": 3, "compile_error": 1, "incorrect": 1}


def test_overall_is_weighted_by_task_count():
    def v(verdict, e=None, c=None):
        return {"verdict": verdict, "speedup_vs_eager": e, "speedup_vs_compile": c}

    rows = [(1, v("correct", 2.0, 2.0)), (1, v("incorrect")),  # level 1: pass 1/2
            (2, v("correct", 4.0, 1.0)), (2, v("correct", 1.0, 0.5)), (2, v("correct", 1.0, 1.0)),
            (2, v("timeout"))]  # level 2: pass 3/4
    level1, level2, overall = summarize_levels(rows)
    assert [s.split for s in (level1, level2, overall)] == ["Level 1", "Level 2", "Overall"]
    assert level1.pass_rate == pytest.approx(0.5) and level2.pass_rate == pytest.approx(0.75)
    # 4 correct of 6; not the unweighted mean of the two levels (0.625)
    assert overall.pass_rate == pytest.approx(4 / 6)
    assert overall.pass_rate == pytest.approx((2 * 0.5 + 4 * 0.75) / 6)
    # eager geomean over the 4 correct: (2 * 4 * 1 * 1) ** (1/4) = 8 ** 0.25
    assert overall.speedup_vs_eager == pytest.approx(8 ** 0.25)
    # faster than compile (> 1.05): only level 1's 2.0 -> 1/6
    assert overall.faster_than_compile == pytest.approx(1 / 6)
    assert level2.faster_than_compile == 0.0


def test_tasks_without_a_level_get_their_own_split():
    rows = [(None, {"verdict": "correct", "speedup_vs_eager": 1.5}), (1, {"verdict": "rejected"})]
    assert [s.split for s in summarize_levels(rows)] == ["Level 1", "Other", "Overall"]


def test_gpu_busy_is_the_lock_union_over_the_time_evaluations_ran_per_gpu():
    from cuda_agent.bench.metrics import gpu_busy, union_s
    from cuda_agent.bench.store import Result

    def res(lane, started, finished, intervals):
        return Result("t", 0, "evaluated", {"timing": {"gpu_lock_intervals": intervals}}, lane=lane,
                      started=started, finished=finished)

    assert union_s([(0, 2), (1, 3), (5, 6)]) == 4 and union_s([]) == 0
    rows = [res("gpu0.0", 0, 10, [(1, 4)]), res("gpu0.1", 2, 12, [(3, 6), (8, 9)]),  # two lanes: 1-6 and 8-9
            res("gpu0.0", 100, 110, [(100, 105)]),  # after a 88 s gap (a resumed run): not counted
            res("gpu1.0", 0, 4, [(0, 4)]),  # a second GPU, busy throughout
            res("cpu", 0, 50, [(0, 50)]), res("gpu0.0", None, None, [(0, 99)])]  # no GPU lane, never finished
    b = gpu_busy(rows)
    assert (b.lock_s, b.running_s, b.gpus) == (6 + 5 + 4, 12 + 10 + 4, 2)
    assert b.share == pytest.approx(15 / 26)
    assert gpu_busy([res("cpu", 0, 1, [])]).share is None


def test_quiet_waits_sum_what_timing_the_baselines_quiet_cost_a_run():
    from cuda_agent.bench.metrics import quiet_waits
    from cuda_agent.bench.store import Result

    def res(quiet):
        return Result("t", 0, "evaluated", {"timing": {"quiet": quiet} if quiet else {}})

    q = quiet_waits([res({"quiet": True, "waited_s": 2.5}), res({"quiet": False, "waited_s": 900.0}), res(None),
                     res({"quiet": True, "waited_s": 0.0})])
    assert (q.timed, q.waited_s, q.max_s, q.not_quiet) == (3, 902.5, 900.0, 1)
    assert quiet_waits([res(None)]).timed == 0


def test_the_report_says_what_the_quiet_baselines_cost():
    from types import SimpleNamespace

    from cuda_agent.bench.report import busy_lines
    from cuda_agent.bench.store import Result

    timing = {"gpu_lock_intervals": [(1, 2)], "quiet": {"quiet": False, "waited_s": 900.0}}
    lines = busy_lines(SimpleNamespace(results=[Result("t", 0, "evaluated", {"timing": timing}, lane="gpu0.0",
                                                       started=0, finished=10)]))
    assert len(lines) == 2 and "waiting 900 s in all" in lines[1] and "1 gave up waiting" in lines[1], lines


def test_a_calibration_miss_is_named_host_bound_only_from_the_verdict_s_own_shares():
    from types import SimpleNamespace

    from cuda_agent.bench.metrics import calibration_row
    from cuda_agent.bench.report import calibration_cells, calibration_summary

    def verdict(speedup, candidate, eager, threshold=0.9):
        hb = {"candidate": candidate, "eager": eager, "threshold": threshold}
        return {"verdict": "correct", "speedup_vs_eager": speedup, "timing": {"host_bound": hb}}

    rows = [calibration_row("L3_19", verdict(0.61, 0.98, 0.95)),   # out, both sides host-bound
            calibration_row("L3_23", verdict(1.40, 0.5, 0.93)),    # out, eager alone host-bound
            calibration_row("L1_78", verdict(1.27, 0.4, 0.3)),     # out, not host-bound
            calibration_row("L3_1", verdict(1.00, 0.99, 0.99)),    # in the band: not named, however bound
            calibration_row("L2_1", verdict(0.5, None, None)),     # unknown (a baseline cached before)
            calibration_row("L2_2", {"verdict": "correct", "speedup_vs_eager": 0.5, "timing": {}})]
    assert [r.host_bound for r in rows] == [True, True, False, True, None, None]
    assert calibration_row("x", verdict(0.5, 0.89, None)).host_bound is False  # under the threshold
    assert calibration_row("x", verdict(0.5, 0.95, None, threshold=0.96)).host_bound is False  # the verdict's own
    assert calibration_row("x", verdict(0.5, True, None)).host_bound is None  # not a share
    s = calibration_summary(SimpleNamespace(calibration=rows))
    assert s.startswith("1/6 tasks") and "2 of the 5 outside it host-bound" in s, s
    assert s.endswith(": L3_19, L3_23"), s
    assert [calibration_cells(r)[-1] for r in rows] == ["yes", "yes", "no", "yes", "-", "-"]
    assert "host-bound" not in calibration_summary(SimpleNamespace(calibration=rows[2:3]))
