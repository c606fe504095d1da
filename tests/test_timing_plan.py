"""The timing warm-up logic, on the CPU with a simulated GPU whose clocks ramp up from idle, and the input
ring's in-place overwrite used by the re-check after timing."""

import pytest
import torch

from cuda_agent.sandbox import timing


class _Ring:
    def next(self):
        return []


def _fake_gpu(monkeypatch, ramp_calls: int, slow_ms: float = 2.0, fast_ms: float = 1.0):
    calls = []

    def time_once(fn, inputs, flush):
        k = len(calls)
        calls.append(k)
        g = fast_ms if k >= ramp_calls else slow_ms - (slow_ms - fast_ms) * k / ramp_calls
        return g, g + 0.01

    monkeypatch.setattr(timing, "time_once", time_once)
    return calls


def test_warmup_runs_until_the_clocks_settle(monkeypatch):
    calls = _fake_gpu(monkeypatch, ramp_calls=120)
    n, per_call, warm = timing.plan_iterations(None, _Ring(), None, warmup_ms=25.0, rep_ms=200.0,
                                               min_iters=10, max_iters=2000)
    assert warm["settled"] and len(calls) > 120  # past the ramp, although 25 ms were spent long before
    assert abs(per_call - 1.0) < 0.02
    assert n == 200


def test_warmup_has_a_ceiling(monkeypatch):
    calls = []

    def time_once(fn, inputs, flush):  # a GPU that never settles: windows alternate by 20%
        calls.append(1)
        g = 2.0 if (len(calls) // 5) % 2 else 2.4
        return g, g

    monkeypatch.setattr(timing, "time_once", time_once)
    _n, _per_call, warm = timing.plan_iterations(None, _Ring(), None, warmup_ms=25.0, rep_ms=200.0,
                                                 min_iters=10, max_iters=2000, max_warmup_ms=300.0)
    assert not warm["settled"]
    assert 300.0 <= warm["warmup_ms"] < 300.0 + 5 * 2.4  # stops within one window past the ceiling


def test_a_steady_gpu_warms_up_for_the_minimum_only(monkeypatch):
    calls = _fake_gpu(monkeypatch, ramp_calls=0)
    timing.plan_iterations(None, _Ring(), None, warmup_ms=100.0, rep_ms=200.0, min_iters=10, max_iters=2000)
    assert 100 <= len(calls) <= 100 + 2 * 10 + 3  # >= 100 ms at 1 ms per call, then one more window


def _gpu(monkeypatch, ms):
    """A simulated GPU whose k-th call (from 0) takes ms(k) milliseconds. Returns the list of calls made."""
    calls = []

    def time_once(fn, inputs, flush):
        g = ms(len(calls))
        calls.append(g)
        return g, g + 0.01

    monkeypatch.setattr(timing, "time_once", time_once)
    return calls


def _windows(est_ms, window, medians):
    """Per-call times: the three estimate calls take est_ms, then the i-th warm-up window of ``window`` calls
    takes medians[i] per call (the last value from then on)."""
    return lambda k: est_ms if k < 3 else medians[min((k - 3) // window, len(medians) - 1)]


def _plan(**kw):
    args = dict(warmup_ms=0.0, rep_ms=200.0, min_iters=10, max_iters=2000)
    args.update(kw)
    return timing.plan_iterations(None, _Ring(), None, **args)


def test_the_warm_up_record_counts_every_call_it_made(monkeypatch):
    """Three estimate calls, then windows of 10 calls at 1 ms: the second window settles past 20 ms."""
    calls = _gpu(monkeypatch, lambda k: 1.0)
    n, per_call, warm = _plan(warmup_ms=20.0)
    assert len(calls) == 23
    assert warm == {"warmup_calls": 23, "warmup_ms": 23.0, "settled": True}
    assert (n, per_call) == (200, 1.0)


@pytest.mark.parametrize("per_call, window", [
    (0.1, 50),  # 100 calls would fill 10 ms: capped at 50
    (0.2, 50),
    (0.5, 20),
    (1.0, 10),
    (2.0, 5),
    (4.0, 5),   # 2.5 calls would fill 10 ms: never fewer than 5
])
def test_each_warm_up_window_is_10_ms_of_gpu_time_within_5_to_50_calls(monkeypatch, per_call, window):
    """A steady GPU with no warm-up minimum settles at its second window: 3 + 2 windows of calls."""
    calls = _gpu(monkeypatch, lambda k: per_call)
    _n, _per_call, warm = _plan()
    assert warm["settled"] and len(calls) == warm["warmup_calls"] == 3 + 2 * window


@pytest.mark.parametrize("warmup_ms, calls", [
    (0.0, 23),   # the first window has nothing to compare with: the second one settles
    (23.0, 23),  # the second window reaches warmup_ms exactly: enough
    (23.5, 33),  # just short of it: one more window
])
def test_a_steady_gpu_stops_at_the_first_window_that_reaches_warmup_ms(monkeypatch, warmup_ms, calls):
    made = _gpu(monkeypatch, lambda k: 1.0)
    _n, _per_call, warm = _plan(warmup_ms=warmup_ms)
    assert warm["settled"] and len(made) == warm["warmup_calls"] == calls
    assert warm["warmup_ms"] == float(calls)


def _unsettled(k):  # 1 ms estimate, then windows of 10 calls alternating 1.0 and 1.5 ms: never settles
    return 1.0 if k < 3 or ((k - 3) // 10) % 2 == 0 else 1.5


@pytest.mark.parametrize("max_iters, calls", [
    (23, 23),  # max_iters calls made: no further window
    (24, 33),  # one call short: a whole further window
])
def test_the_warm_up_stops_once_it_has_made_max_iters_calls(monkeypatch, max_iters, calls):
    made = _gpu(monkeypatch, _unsettled)
    _n, _per_call, warm = _plan(max_iters=max_iters)
    assert not warm["settled"] and len(made) == warm["warmup_calls"] == calls


@pytest.mark.parametrize("max_warmup_ms, calls, spent", [
    (38.0, 33, 38.0),  # 3 + 10 + 15 + 10 ms: the ceiling reached exactly, no further window
    (38.5, 43, 53.0),  # just under it: one more window (at 1.5 ms)
])
def test_the_warm_up_stops_once_it_has_spent_max_warmup_ms(monkeypatch, max_warmup_ms, calls, spent):
    made = _gpu(monkeypatch, _unsettled)
    _n, _per_call, warm = _plan(max_warmup_ms=max_warmup_ms)
    assert warm == {"warmup_calls": calls, "warmup_ms": spent, "settled": False}
    assert len(made) == calls


def test_window_medians_exactly_settle_tol_apart_count_as_settled(monkeypatch):
    """Within settle_tol includes the bound: windows at 1.25 then 1.0 ms are 25% of 1.0 apart."""
    made = _gpu(monkeypatch, _windows(1.0, 10, [1.25, 1.0]))
    _n, per_call, warm = _plan(settle_tol=0.25)
    assert warm["settled"] and len(made) == warm["warmup_calls"] == 23
    assert per_call == 1.0


@pytest.mark.parametrize("ms, step, window, settle_tol, calls", [
    # an 8 ms kernel whose second window is 0.125 ms (1.6%) faster than its first: settled at 2%, not at 1%
    (8.0, 0.125, 5, 0.02, 13),
    (8.0, 0.125, 5, 0.01, 18),
    # a 0.25 ms kernel, 2**-8 ms (1.6%) faster: the same verdicts
    (0.25, 2.0 ** -8, 40, 0.02, 83),
    (0.25, 2.0 ** -8, 40, 0.01, 123),
])
def test_settle_tol_is_relative_to_the_window_median(monkeypatch, ms, step, window, settle_tol, calls):
    """Unsettled, the warm-up takes one more window (at the same median, so that one settles)."""
    made = _gpu(monkeypatch, _windows(ms, window, [ms + step, ms]))
    _n, per_call, warm = _plan(settle_tol=settle_tol)
    assert warm["settled"] and len(made) == warm["warmup_calls"] == calls
    assert per_call == ms


def test_the_warm_up_record_reports_gpu_ms_to_the_microsecond(monkeypatch):
    """19 calls at 1.23456 ms (windows of 8): 23.45664 ms, reported as 23.457."""
    _gpu(monkeypatch, lambda k: 1.23456)
    _n, _per_call, warm = _plan()
    assert warm["warmup_calls"] == 19
    assert warm["warmup_ms"] == 23.457


def test_overwrite_writes_new_values_into_the_very_same_buffers():
    sets = [[torch.ones(4), torch.arange(3), 7], [torch.full((4,), 2.0), torch.arange(3), 7],
            [torch.zeros(4), torch.arange(3), 7]]
    ring = timing.InputRing(sets, torch.device("cpu"))
    ptrs = [[x.data_ptr() for x in s[:2]] for s in ring.bufs]
    new = [[torch.arange(4.0) + 10, torch.arange(3) + 100, 7], [torch.arange(4.0) + 20, torch.arange(3) + 200, 7]]
    out = ring.overwrite(new)
    assert out is ring.bufs
    assert [[x.data_ptr() for x in s[:2]] for s in out] == ptrs  # same addresses
    for got, want in zip(out, new):  # float and integer tensors alike, copies and not the caller's tensors
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert got[0] is not want[0] and got[2] == 7
    assert torch.equal(out[2][0], torch.zeros(4)) and torch.equal(out[2][1], torch.arange(3))  # no new set: as it was
