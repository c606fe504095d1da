"""The timing warm-up logic, on the CPU with a simulated GPU whose clocks ramp up from idle, the input
ring's in-place overwrite used by the re-check after timing, and the timed-output checksums (weights, sums,
precision, devices) with the per-call samples of the timed loop."""

import time

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
    new = [[torch.arange(4.0) + 10, torch.arange(3) + 100, 7], [torch.arange(4.0) + 20, torch.arange(3) + 200, 9]]
    out = ring.overwrite(new)
    assert out is ring.bufs
    assert [[x.data_ptr() for x in s[:2]] for s in out] == ptrs  # same addresses
    for got, want in zip(out, new):  # float and integer tensors alike, copies and not the caller's tensors
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert got[0] is not want[0] and got[2] == want[2]  # a plain number: the new set's (7, then 9)
    assert torch.equal(out[2][0], torch.zeros(4)) and torch.equal(out[2][1], torch.arange(3))  # no new set: as it was


def test_the_warm_up_ceiling_defaults_to_1000_ms(monkeypatch):
    """Estimates of 1, 1 and 23 ms (25 ms, windows of 10 calls), then windows alternating 1.0 and 1.5 ms per call:
    78 windows spend exactly 1000 ms, and the worker, which passes no ceiling, stops there."""
    made = _gpu(monkeypatch, lambda k: 23.0 if k == 2 else 1.0 if k < 3 or ((k - 3) // 10) % 2 == 0 else 1.5)
    _n, _per_call, warm = _plan(max_iters=100_000)
    assert warm == {"warmup_calls": 3 + 78 * 10, "warmup_ms": 1000.0, "settled": False}
    assert len(made) == 783


def test_refresh_scales_are_the_golden_ratio_sequence():
    """0.5 + 0.5 * frac(step / golden ratio), to the last bit."""
    got = [timing.refresh_scale(k) for k in (1, 2, 3, 10, 1000, 123457)]
    assert got == [0.8090169943749475, 0.6180339887498949, 0.9270509831248424, 0.5901699437494745,
                   0.5169943749474442, 0.8110745478843455]


def test_the_input_ring_holds_its_copies_on_the_device_it_is_given():
    ring = timing.InputRing([[torch.ones(3), torch.arange(2), 5]], torch.device("meta"))
    buf = ring.bufs[0]
    assert buf[0].device.type == "meta" and buf[1].device.type == "meta" and buf[2] == 5
    assert ring.pristine[0][0].device.type == "meta" and ring.pristine[0][1] is None


@pytest.mark.parametrize("seed, n, signs", [
    (7, 12, "-++---+-+--+"),
    (7, 13, "+-+--+-+-+--+"),
    (8, 12, "+-+----++--+"),
])
def test_checksum_weights_are_plus_or_minus_one_drawn_from_the_seed_and_the_size(seed, n, signs):
    w = timing.OutputChecksum(seed, torch.device("cpu")).weights(n)
    assert w.dtype == torch.float64 and w.device.type == "cpu"
    assert w.tolist() == [1.0 if s == "+" else -1.0 for s in signs]
    assert torch.equal(timing.OutputChecksum(seed, torch.device("cpu")).weights(n), w)  # another instance, the same


def test_checksum_weights_are_drawn_by_a_generator_on_the_checksum_device(monkeypatch):
    """A CUDA draw takes a CUDA generator: the generator is made for the checksum's device."""
    devices, real = [], torch.Generator

    def generator(device=None):
        devices.append(device)
        return real(device=device)

    monkeypatch.setattr(torch, "Generator", generator)
    timing.OutputChecksum(3, torch.device("cpu")).weights(5)
    assert devices == [torch.device("cpu")]


def test_the_checksum_of_an_output_sums_dot_products_and_squared_norms_over_its_tensor_leaves():
    ck = timing.OutputChecksum(11, torch.device("cpu"))
    a, b, c = torch.arange(6.0) - 2, torch.tensor([[1.5, -2.0], [0.25, 3.0]]), torch.tensor([4, -1, 2])
    assert list(timing.leaves([a, (b, [c, 7]), None])) == [a, b, c, 7, None]

    def one(x):
        v = x.reshape(-1).double()
        return [float(torch.dot(v, ck.weights(v.numel()))), float(torch.dot(v, v))]

    got = ck([a, (b, [c, 7]), None]).tolist()
    parts = [one(a), one(b), one(c)]
    assert got == [sum(p[0] for p in parts), sum(p[1] for p in parts)]
    assert ck(a).tolist() == one(a) and one(a)[0] != 0
    assert ck((b,)).tolist() == one(b)


class _Clock:
    """CUDA events whose k-th elapsed_time is gpu[k], and a host clock that reads the next of ``ticks``."""

    def __init__(self, gpu, ticks):
        self.gpu, self.ticks = iter(gpu), iter(ticks)
        clock = self

        class Event:
            def __init__(self, enable_timing=True):
                pass

            def record(self):
                pass

            def elapsed_time(self, other):
                return next(clock.gpu)

        self.Event = Event

    def perf_counter(self):
        return next(self.ticks)


def _exact(monkeypatch, gpu=(1.0,) * 64, ticks=None):
    clock = _Clock(gpu, ticks if ticks is not None else (0.0 for _ in iter(int, 1)))
    monkeypatch.setattr(timing, "_Event", clock.Event)
    monkeypatch.setattr(timing, "_perf_counter", clock.perf_counter)
    monkeypatch.setattr(timing, "_synchronize", lambda: None)


def test_run_timed_reports_each_call_s_gpu_and_wall_time_and_the_inputs_it_used(monkeypatch):
    # the host clock per call: before the start event, after the end event is recorded (issue), after the sync
    _exact(monkeypatch, gpu=[1.0, 3.0, 2.0], ticks=[0.0, 0.1, 0.25, 1.0, 1.0005, 1.001, 2.0, 2.2, 2.5])
    ring = timing.InputRing([[torch.ones(1)], [torch.full((1,), 2.0)]], torch.device("cpu"))
    for _ in range(5):
        ring.next()
    res = timing.run_timed(lambda x: x.clone(), ring, lambda: None, 3, timing.OutputChecksum(1, torch.device("cpu")))
    assert res["gpu_ms"] == [1.0, 3.0, 2.0] and res["gpu_median_ms"] == 2.0 and res["n"] == 3
    assert res["wall_ms"] == pytest.approx([250.0, 1.0, 500.0]) and res["wall_median_ms"] == pytest.approx(250.0)
    assert res["issue_median_ms"] == pytest.approx(100.0)  # of 100, 0.5 and 200 ms
    assert res["start_step"] == 5 and ring.step == 8
    # steps 6, 7, 8 use sets 1, 0, 1, scaled by refresh_scale(step) in float32
    want = [float(torch.tensor(base * timing.refresh_scale(step), dtype=torch.float32)) ** 2
            for base, step in ((2.0, 6), (1.0, 7), (2.0, 8))]
    assert [c[1] for c in res["checksums"]] == want


def _fine(*_inputs):
    """An output whose checksum is exact in float64 and not in float32: 1 + 2**-30 and its square."""
    return torch.tensor([1 + 2.0 ** -30], dtype=torch.float64)


def test_checksums_are_kept_in_float64(monkeypatch):
    _exact(monkeypatch)
    cpu = torch.device("cpu")
    ck = timing.OutputChecksum(5, cpu)
    w = ck.weights(1).item()
    want = [w * (1 + 2.0 ** -30), 1 + 2.0 ** -29]
    assert ck(_fine()).dtype == torch.float64 and ck(_fine()).tolist() == want
    ring = timing.InputRing([[torch.ones(2)]], cpu)
    assert timing.run_timed(_fine, ring, lambda: None, 3, ck)["checksums"] == [want] * 3
    assert timing.checksums(_fine, ring, 3, ck) == [want] * 3


def test_checksums_are_made_on_the_checksum_device_whatever_torch_s_default_device(monkeypatch):
    """Candidate code may change torch's default device: the timing loop names its devices."""
    _exact(monkeypatch)
    cpu = torch.device("cpu")

    sets = [[torch.arange(4.0)], [torch.arange(4.0) - 2]]

    def both():
        ring = timing.InputRing(sets, cpu)
        timed = timing.run_timed(lambda x: x * 3, ring, lambda: None, 4, timing.OutputChecksum(9, cpu))
        ring.step = timed["start_step"]
        return timed["checksums"], timing.checksums(lambda x: x * 3, ring, 4, timing.OutputChecksum(9, cpu))

    plain = both()
    assert plain[0] == plain[1] and all(c[1] > 0 for c in plain[0])
    with torch.device("meta"):
        assert both() == plain


class _Output(torch.Tensor):
    """An output tensor that records the devices it is asked to move to."""
    targets: list = []

    def to(self, *args, **kwargs):
        _Output.targets += [a for a in (*args, kwargs.get("device")) if isinstance(a, torch.device)]
        return super().to(*args, **kwargs)


def test_each_output_leaf_is_moved_to_the_checksum_device():
    """An output on another device than the checksum's (a CPU tensor from a GPU candidate) is moved, not refused."""
    _Output.targets = []
    out = (torch.arange(3.0) + 1).as_subclass(_Output)
    ck = timing.OutputChecksum(2, torch.device("cpu"))
    assert ck(out).tolist() == [float(torch.dot(torch.arange(3.0).double() + 1, ck.weights(3))), 14.0]
    assert _Output.targets == [torch.device("cpu")]


@pytest.mark.parametrize("n", [1, 7, 8, 9, 30])
def test_a_checksum_over_chunks_equals_the_whole_output_s_and_keeps_long_weights_as_int8(monkeypatch, n):
    """An output longer than one chunk: the same two sums (integers: exact in float64), its weights kept as
    int8 signs, never a float64 copy of the whole output or of its weights (KernelBench L1_19: 6 GiB)."""
    monkeypatch.setattr(timing.OutputChecksum, "CHUNK", 8)
    ck = timing.OutputChecksum(4, torch.device("cpu"))
    out = (torch.arange(n, dtype=torch.float32) - 3).reshape(-1, 1)
    w = ck.weights(n)
    assert w.dtype == torch.float64 and set(w.tolist()) <= {-1.0, 1.0}
    v = out.reshape(-1).double()
    assert ck(out).tolist() == [float(torch.dot(v, w)), float(torch.dot(v, v))]
    assert ck._weights[n].dtype == (torch.int8 if n > 8 else torch.float64)
    monkeypatch.setattr(timing.OutputChecksum, "CHUNK", 1 << 24)
    assert torch.equal(timing.OutputChecksum(4, torch.device("cpu")).weights(n), w)  # chunking changes no weight


def test_the_checksum_of_a_complex_output_covers_its_imaginary_part():
    ck = timing.OutputChecksum(6, torch.device("cpu"))
    z = torch.complex(torch.arange(5.0), torch.arange(5.0) + 1)
    assert ck(z).tolist() != ck(torch.complex(z.real, -z.imag)).tolist()
    assert ck(z).tolist() == ck(torch.view_as_real(z)).tolist()


def _recording_gpu(monkeypatch, samples):
    """time_once replaced: records (fn, inputs, flush, after) of each call; the k-th returns samples[k]."""
    calls = []

    def time_once(fn, inputs, flush, after=None, issue=None):
        calls.append((fn, inputs, flush, after))
        return samples[min(len(calls) - 1, len(samples) - 1)]

    monkeypatch.setattr(timing, "time_once", time_once)
    return calls


def test_the_warm_up_times_the_function_on_the_ring_s_next_inputs_with_the_flush(monkeypatch):
    calls = _recording_gpu(monkeypatch, [(1.0, 1.0)])

    class Ring:
        step = 0

        def next(self):
            self.step += 1
            return [self.step]

    def fn(*_):
        return None

    def flush():
        return None

    n, _per_call, warm = timing.plan_iterations(fn, Ring(), flush, warmup_ms=0.0, rep_ms=200.0, min_iters=10,
                                                max_iters=2000, max_window_ms=20.0)
    assert len(calls) == warm["warmup_calls"] == 23
    assert all(c[0] is fn and c[2] is flush for c in calls)
    assert [c[1] for c in calls] == [[k] for k in range(1, 24)]  # every call on the next set, none skipped
    assert n == 20  # 200 calls would fill rep_ms; max_window_ms holds it to 20 calls of 1 ms


def test_the_timed_loop_without_a_checksum_times_each_call_and_checks_nothing(monkeypatch):
    calls = _recording_gpu(monkeypatch, [(1.0, 2.0), (3.0, 5.0), (2.0, 2.5)])
    ring = timing.InputRing([[torch.ones(1)]], torch.device("cpu"))
    res = timing.run_timed(lambda x: x, ring, lambda: None, 3)
    assert [c[3] for c in calls] == [None, None, None]
    assert res == {"gpu_ms": [1.0, 3.0, 2.0], "wall_ms": [2.0, 5.0, 2.5], "n": 3, "gpu_median_ms": 2.0,
                   "wall_median_ms": 2.5}


def test_the_harness_gap_is_the_median_of_wall_minus_gpu_over_50_flushed_calls_of_an_add(monkeypatch):
    # wall - gpu: 49 samples of 0.010 ms and one of 5 ms (a stall): the median ignores the stall, a mean would not
    samples = [(1.0, 1.010)] * 49 + [(1.0, 6.0)]
    calls = _recording_gpu(monkeypatch, samples)

    def flush():
        return None

    gap = timing.gap_curve(torch.device("cpu"), flush)[0][1]
    assert gap == pytest.approx(0.010) and len(calls) == 50
    assert all(c[1] == [] and c[2] is flush for c in calls)
    x1, x2 = calls[0][0](), calls[1][0]()  # the timed call adds 1.0 in place to a 1024-element tensor
    assert x1 is x2 and x1.shape == (1024,) and x1.device.type == "cpu"
    x1.zero_()  # torch.empty's values: whatever the memory held
    calls[2][0]()
    assert torch.equal(x1, torch.ones(1024))
    calls = _recording_gpu(monkeypatch, [(1.0, 1.02)])
    assert timing.gap_curve(torch.device("cpu"), flush, n=7)[0][1] == pytest.approx(0.02) and len(calls) == 7
    calls = _recording_gpu(monkeypatch, [(1.0, 1.0)])
    timing.gap_curve(torch.device("meta"), flush, n=1)
    assert calls[0][0]().device.type == "meta"  # its tensor lies on the device measured


def test_the_gap_curve_times_spin_kernels_of_each_ladder_length_after_the_trivial_call(monkeypatch):
    """On a GPU the honest overhead is measured at several lengths: a spin kernel (torch.cuda._sleep) of about
    each ladder length, its cycles per ms the median of three probe spins; wall - gpu rises with length here.
    Every call is timed with no inputs and the caller's L2 flush."""
    cycles, calls, devices, real_empty = [], [], [], torch.empty
    monkeypatch.setattr(timing, "rehearsal", lambda: False)
    # no CUDA on this machine: the trivial call's tensor is made on the CPU, the device it was asked on kept
    monkeypatch.setattr(timing.torch, "empty", lambda *a, **k: (devices.append(k.get("device")), real_empty(1024))[1])
    monkeypatch.setattr(timing.torch.cuda, "_sleep", lambda c: cycles.append(c), raising=False)
    probes = iter([0.4, 0.1, 0.2])  # ms of the three 200k-cycle probes: the median (not the mean), 0.2 ms: 1 GHz

    def time_once(fn, inputs, flush, after=None, issue=None):
        calls.append((inputs, flush, after))
        before = len(cycles)
        fn()
        if len(cycles) > before and cycles[-1] == 200_000 and len(cycles) <= 3:
            gpu = next(probes)
        else:
            gpu = cycles[-1] / 1e6 if len(cycles) > before else 0.01  # the add takes 10 us
        return gpu, gpu + 0.02 + 0.065 * min(gpu / 0.8, 1.0)

    def flush():
        return None

    monkeypatch.setattr(timing, "time_once", time_once)
    curve = timing.gap_curve(torch.device("cuda"), flush, n=20)
    assert [round(g, 6) for g, _ in curve] == [0.01, 0.1, 0.3, 1.0, 3.0]
    assert [d for _, d in curve] == pytest.approx([0.02 + 0.065 * min(g / 0.8, 1.0) for g, _ in curve])
    assert cycles[:3] == [200_000] * 3  # the probes, then n // 2 spins of each length
    assert cycles[3:] == [100_000] * 10 + [300_000] * 10 + [1_000_000] * 10 + [3_000_000] * 10
    assert len(calls) == 20 + 3 + 4 * 10 and all(c == ([], flush, None) for c in calls)
    assert timing.gap_at(curve, 0.2) == pytest.approx((curve[1][1] + curve[2][1]) / 2)
    # the trivial point: n adds, on the device measured
    assert curve[0] == pytest.approx([0.01, 0.02 + 0.065 * 0.01 / 0.8]) and devices == [torch.device("cuda")]
    # at least 5 spins a length, however small n
    del cycles[:]
    probes = iter([0.4, 0.1, 0.2])
    timing.gap_curve(torch.device("cuda"), flush, n=4)
    assert cycles[3:] == [100_000] * 5 + [300_000] * 5 + [1_000_000] * 5 + [3_000_000] * 5
    # by default: 50 adds, the 3 probes, 25 spins of each length
    del cycles[:], calls[:]
    probes = iter([0.4, 0.1, 0.2])
    timing.gap_curve(torch.device("cuda"), flush)
    assert len(calls) == 50 + 3 + 4 * 25 and cycles[3:] == [100_000] * 25 + [300_000] * 25 + [1_000_000] * 25 + \
        [3_000_000] * 25
    # no lengths asked for (the reference's worker), a CPU device, a rehearsal, a torch without _sleep:
    # the trivial call only, and no spin kernel at all
    del cycles[:], calls[:]
    assert len(timing.gap_curve(torch.device("cuda"), flush, n=10, ladder=())) == 1 and not cycles
    assert len(timing.gap_curve(torch.device("cpu"), flush, n=10)) == 1 and not cycles
    monkeypatch.delattr(timing.torch.cuda, "_sleep")
    assert len(timing.gap_curve(torch.device("cuda"), flush, n=10)) == 1 and not cycles
    monkeypatch.setattr(timing.torch.cuda, "_sleep", lambda c: cycles.append(c), raising=False)
    monkeypatch.setattr(timing, "rehearsal", lambda: True)
    assert len(timing.gap_curve(torch.device("cuda"), flush, n=10)) == 1 and not cycles
    assert len(calls) == 4 * 10


@pytest.mark.parametrize("curve, gpu_ms, gap", [
    ([[0.01, 0.02], [1.0, 0.08]], 0.505, 0.05),  # linear between points
    ([[1.0, 0.08], [0.01, 0.02]], 0.001, 0.02),  # flat below the first (in any order)
    ([[0.01, 0.02], [1.0, 0.08]], 50.0, 0.08),  # and beyond the last
    ([[0.01, 0.02], [0.5, 0.03], [1.0, 0.08]], 0.75, 0.055),  # the segment the length falls in
    ([[0.01, 0.02], [0.5, 0.03], [1.0, 0.08]], 9.0, 0.08),  # beyond the last of three
    ([[0.01, 0.02], [0.5, 0.03], [1.0, 0.08]], float("nan"), 0.0),  # a length that is no number: nothing
    ("tampered", 1.0, 0.0),  # not a curve: no overhead allowed at all
    ([[0.01, float("nan")]], 1.0, 0.0),
    ("12", 1.0, 0.0),  # a string of two digits is no pair of numbers
    ([b"ab"], 1.0, 0.0),
    ([[True, 0.1]], 1.0, 0.0),
    ({"1": 2}, 1.0, 0.0),
    ([[0.01, 10**400]], 1.0, 0.0),  # an int past any float
    ([[0.01, 0.02]] * 17, 1.0, 0.0),  # more points than the harness sends
    ([[0.01 * (i + 1), 0.02] for i in range(16)], 1.0, 0.02),  # as many as it may
    ([[0.02, 0.03]], 2.0, 0.03),  # one point (the reference's worker, a rehearsal): flat
    ([(0.01, 0.02), (1.0, 0.08)], 0.505, 0.05),  # pairs as tuples are fine
    ([[0.01, 0.02], [1.0, 0.08]], 10**400, 0.0),  # a length that is no float
    ([[0.01, 0.02], [1.0, 0.08]], "0.5", 0.0),
    ([[float("nan"), 0.02], [1.0, 0.08]], 2.0, 0.0),  # a length that is no number, in any point
    ([[0.01]], 1.0, 0.0),
    ([], 1.0, 0.0),
])
def test_the_gap_at_a_length_is_read_off_the_curve_and_a_bad_curve_allows_nothing(curve, gpu_ms, gap):
    assert timing.gap_at(curve, gpu_ms) == pytest.approx(gap)
    assert timing.gap_at(curve, gpu_ms, cap=0.03) == pytest.approx(min(gap, 0.03))  # never above a cap


@pytest.mark.parametrize("props, l2", [
    (type("P", (), {"L2_cache_size": 60 << 20})(), 60 << 20),  # the GPU's own L2 size
    (type("P", (), {"L2_cache_size": 0})(), 50 << 20),  # not reported: 50 MiB (an H100's)
    (object(), 50 << 20),  # no such property in this torch: the same
])
def test_the_l2_flusher_zeroes_twice_the_gpu_s_l2_cache_in_int32(monkeypatch, props, l2):
    made = []
    real_empty = torch.empty

    def empty(n, dtype=None, device=None):
        made.append((n, dtype, torch.device(device)))
        return real_empty(n, dtype=dtype)

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: asked.append(device) or props)
    monkeypatch.setattr(torch, "empty", empty)
    flush = timing.L2Flusher(torch.device("cuda", 0))
    assert made == [(2 * l2 // 4, torch.int32, torch.device("cuda", 0))] and asked == [torch.device("cuda", 0)]
    flush.buf.fill_(7)
    flush()
    assert not flush.buf.any()


def test_the_l2_flusher_of_a_rehearsal_is_2_mib_on_the_host():
    flush = timing.L2Flusher(torch.device("cpu"))
    assert flush.buf.dtype == torch.int32 and flush.buf.numel() * 4 == 2 << 20 and flush.buf.device.type == "cpu"


def test_a_rehearsal_s_host_event_times_between_its_records_in_ms(monkeypatch):
    ticks = iter([10.0, 10.25])
    monkeypatch.setattr(timing, "_perf_counter", lambda: next(ticks))
    start, end = timing._HostEvent(enable_timing=True), timing._HostEvent(enable_timing=True)
    start.record()
    end.record()
    assert start.elapsed_time(end) == 250.0 and end.elapsed_time(start) == -250.0


def test_the_host_s_issue_time_is_read_after_the_end_event_is_recorded_and_before_the_sync(monkeypatch):
    """With ``issue``, one more host clock reading, between recording the end event and the sync: the host's time
    to launch the call, which equals the GPU time when the GPU waited for the host (timing.HOST_BOUND)."""
    log = []

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            log.append("record")

        def elapsed_time(self, other):
            return 4.0

    ticks = iter([1.0, 1.003, 1.005])
    monkeypatch.setattr(timing, "_Event", Event)
    monkeypatch.setattr(timing, "_synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(timing, "_perf_counter", lambda: log.append("clock") or next(ticks))
    issue = []
    g, w = timing.time_once(lambda: log.append("call"), [], lambda: None, issue=issue)
    assert (g, w) == (4.0, pytest.approx(5.0)) and issue == [pytest.approx(3.0)]
    assert log == ["sync", "clock", "record", "call", "record", "clock", "sync", "clock"]


def test_run_timed_reports_the_median_issue_time_and_the_host_bound_share_reads_it(monkeypatch):
    monkeypatch.setattr(timing, "_Event", timing._HostEvent)  # no CUDA here: the host clock stands in
    monkeypatch.setattr(timing, "_synchronize", lambda: None)
    ring = timing.InputRing([[torch.ones(1)]], torch.device("cpu"))
    res = timing.run_timed(lambda x: time.sleep(0.002) or x, ring, lambda: None, 3)
    assert 2.0 <= res["issue_median_ms"] <= res["wall_median_ms"], res
    assert timing.host_bound_share(1.8, 2.0) == 0.9 and timing.host_bound_share(0.1, 2.0) == 0.05
    for bad in ((None, 2.0), (1.0, 0.0), (True, 2.0), (float("nan"), 2.0), (1.0, float("inf")), ("1", 2.0)):
        assert timing.host_bound_share(*bad) is None, bad
    for huge in ((10**400, 2.0), (2.0, 10**400), (1e300, 1e-300), (1.0, 5e-324), (-1.0, 2.0)):  # a tampered reply
        assert timing.host_bound_share(*huge) is None, huge
    line = timing.host_bound_line
    assert line({"candidate": 0.7, "eager": None, "threshold": 0.7}).startswith(
        "host-bound: the host took 70% of your call's GPU time to issue it. At 70% or more")
    assert line({"candidate": 0.75, "eager": 0.2, "threshold": 0.7}).startswith(
        "host-bound: the host took 75% of your call's GPU time to issue it (eager: 20%).")
    # eager's alone: no advice on the agent's kernels, the speed-up's dependence on the host said
    assert line({"candidate": None, "eager": 0.9, "threshold": 0.7}) == (
        "host-bound eager: its launch took 90% of its GPU time, so eager's time, and with it your speed-up vs "
        "eager, moves with the host's speed between runs")
    assert line({"candidate": 0.02, "eager": 0.9, "threshold": 0.7}).startswith(
        "host-bound eager: its launch took 90% of its GPU time (yours: 2%), so")
    for quiet in (None, [], {"candidate": 0.69, "eager": 0.1, "threshold": 0.7}, {"candidate": 0.9},
                  {"candidate": True, "threshold": 0.7}, {"candidate": 0.9, "threshold": True}):
        assert line(quiet) is None, quiet


def test_one_timed_call_flushes_then_records_two_timing_events_around_the_call_only(monkeypatch):
    """The order of one call: flush, sync, host clock, start event, the call, end event, sync, host clock, then
    ``after`` outside both clocks; the GPU time is start.elapsed_time(end) of two events made with timing on."""
    log = []

    class Event:
        def __init__(self, enable_timing=False):
            self.timing, self.name = enable_timing, f"event{sum(e.startswith('make') for e in log)}"
            log.append(f"make {self.name} timing={enable_timing}")

        def record(self):
            log.append(f"record {self.name}")

        def elapsed_time(self, other):
            assert self.timing and other.timing  # CUDA refuses elapsed_time between events made without timing
            log.append(f"elapsed {self.name}->{other.name}")
            return 4.0

    ticks = iter([1.0, 1.5])
    monkeypatch.setattr(timing, "_Event", Event)
    monkeypatch.setattr(timing, "_synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(timing, "_perf_counter", lambda: log.append("clock") or next(ticks))
    g, w = timing.time_once(lambda x: log.append(f"call {x}") or "out", [3], lambda: log.append("flush"),
                            after=lambda out: log.append(f"after {out}"))
    assert (g, w) == (4.0, 500.0)
    assert log == ["flush", "make event0 timing=True", "make event1 timing=True", "sync", "clock", "record event0",
                   "call 3", "record event1", "sync", "clock", "after out", "elapsed event0->event1"]
