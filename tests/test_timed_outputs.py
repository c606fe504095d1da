"""The timed-output check on the CPU: the candidate's timing loop checksums every timed output, the
reference recomputes them on the same inputs, and a candidate that is right only when checked fails.
(CUDA events and synchronization are replaced by no-ops; everything else is the real code.)"""

import pytest
import torch

from cuda_agent.sandbox import timing
from cuda_agent.sandbox.evaluator import timed_output_mismatches

CPU = torch.device("cpu")


class _Event:
    def __init__(self, enable_timing=True):
        pass

    def record(self):
        pass

    def elapsed_time(self, other):
        return 1.0


@pytest.fixture(autouse=True)
def cpu_clock(monkeypatch):
    monkeypatch.setattr(timing, "_Event", _Event)
    monkeypatch.setattr(timing, "_synchronize", lambda: None)


def _rotation(n_sets=3, shape=(64, 33)):
    g = torch.Generator().manual_seed(0)
    return [[torch.randn(*shape, generator=g)] for _ in range(n_sets)]


def _timed(fn, rotation, seed=7, warm_steps=5, n=40):
    ring = timing.InputRing(rotation, CPU)
    for _ in range(warm_steps):  # as prepare_timing: a first call and the warm-up advance the ring
        fn(*ring.next())
    return timing.run_timed(fn, ring, lambda: None, n, timing.OutputChecksum(seed, CPU))


def _reference(fn, rotation, res, seed=7):
    ring = timing.InputRing(rotation, CPU)
    ring.step = res["start_step"]
    return timing.checksums(fn, ring, len(res["checksums"]), timing.OutputChecksum(seed, CPU))


def model(x):
    return torch.tanh(x) * 2 + 1


def test_refresh_scales_are_unique_in_range_and_far_apart_for_nearby_steps():
    scales = [timing.refresh_scale(k) for k in range(1, 20001)]
    assert len(set(scales)) == len(scales) and all(0.5 <= s < 1.0 for s in scales)
    for lag in range(1, 5):  # a rotation has at most 4 sets: an output kept for one buffer is lag calls old
        assert min(abs(scales[k] - scales[k - lag]) for k in range(lag, len(scales))) > 0.03


def test_honest_candidate_passes_and_weights_agree_across_instances():
    rot = _rotation()
    res = _timed(lambda x: model(x) * (1 + 1e-7), rot)  # fp noise well inside tolerance
    assert res["start_step"] == 5 and len(res["checksums"]) == 40
    assert timed_output_mismatches(res["checksums"], _reference(model, rot, res), 1e-4) == []


def test_candidate_that_skips_work_while_timed_is_caught():
    rot = _rotation()
    state = {"calls": 0, "last": None}

    def lazy(x):  # right for the first calls (the checked ones), then hands back the last output
        state["calls"] += 1
        if state["last"] is None or state["calls"] < 10:
            state["last"] = model(x)
        return state["last"]

    res = _timed(lazy, rot)
    bad = timed_output_mismatches(res["checksums"], _reference(model, rot, res), 1e-4)
    assert len(bad) >= 30


def test_pointer_keyed_cache_is_off_by_the_refresh_scale():
    rot = _rotation()
    cache = {}

    def cached(x):  # an output cache keyed by the input buffer's address
        key = x.data_ptr()
        if key not in cache:
            cache[key] = model(x)
        return cache[key]

    res = _timed(cached, rot, warm_steps=5)
    bad = timed_output_mismatches(res["checksums"], _reference(model, rot, res), 1e-4)
    assert len(bad) == 40


def test_garbage_and_nan_checksums_fail_and_matching_nan_passes():
    good = [[3.0, 4.0]]
    assert timed_output_mismatches([[3.0, 4.0]], good, 1e-4) == []
    assert timed_output_mismatches([[float("nan"), 4.0]], good, 1e-4) == [0]
    assert timed_output_mismatches([["x"]], good, 1e-4) == [0]
    nan_ref = [[float("nan"), float("nan")]]
    assert timed_output_mismatches([[float("nan"), float("nan")]], nan_ref, 1e-4) == []
    assert timed_output_mismatches([[1.0, 1.0]], nan_ref, 1e-4) == [0]
