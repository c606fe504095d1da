"""The timing warm-up logic, on the CPU with a simulated GPU whose clocks ramp up from idle."""

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
