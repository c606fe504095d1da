"""The GPU pass: its pure-Python parts on CPU, the rest behind @pytest.mark.gpu."""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.synth.gpu import (  # noqa: E402
    meta_footprint, module_constants, rewrite_constants, scalable_constants)

MINI = Path(__file__).parent / "data" / "kernelbench_mini"
CONV = (MINI / "level2" / "1_Conv2D_ReLU_BiasAdd.py").read_text()


def test_scalable_constants_are_sizes_batch_first():
    src = CONV.replace("height, width = 32, 32", "height = 32\nwidth = 32")
    knobs = scalable_constants(src)
    assert knobs[0] == "batch_size"
    assert {"out_channels", "height", "width"} <= set(knobs)
    assert "kernel_size" not in knobs and "in_channels" not in knobs  # 3 < 8: not a size knob


def test_rewrite_constants_changes_only_the_literals():
    src = CONV.replace("height, width = 32, 32", "height = 32\nwidth = 32")
    new = rewrite_constants(src, {"batch_size": 512, "height": 64})
    consts = {k: v for k, (v, _) in module_constants(new).items()}
    assert consts["batch_size"] == 512 and consts["height"] == 64 and consts["width"] == 32
    assert new.replace("512", "128", 1).replace("= 64", "= 32", 1) == src


def test_meta_footprint_grows_with_scaling_and_rejects_broken_scalings():
    src = CONV.replace("height, width = 32, 32", "height = 32\nwidth = 32")
    base = meta_footprint(src)
    assert base and meta_footprint(rewrite_constants(src, {"batch_size": 256})) > base
    broken = rewrite_constants(src, {"height": 1})  # a 3x3 conv cannot run on 1 row
    assert meta_footprint(broken) is None


RELU = (MINI / "level1" / "19_ReLU.py").read_text().replace("16384", "64")


def _cost_model(checker, ms_per_element):
    """Replace wall-clock timing by a time proportional to the input's size: the search is
    what is under test, and a loaded CI machine's clock made it flaky."""
    def measure(source, name="task"):
        consts = {k: v for k, (v, _) in module_constants(source).items()}
        return consts["batch_size"] * consts["dim"] * ms_per_element
    checker.measure = measure
    return checker


def test_scaling_loop_reaches_the_window():
    """The GPU pass's search on device="cpu", timed by a cost model."""
    from cuda_agent.synth.gpu import GpuChecker

    checker = _cost_model(GpuChecker(window_ms=(2.0, 60.0), device="cpu", compile=False), 1e-5)
    res = checker.check_source(RELU)  # 16 x 64 elements: 0.01 ms, far below the window
    assert res.runtime == "pass", res.runtime
    assert 2.0 <= res.eager_ms <= 60.0 and res.rounds >= 2  # at most x64 a round from below
    assert res.constants["batch_size"] > 16
    consts = {k: v for k, (v, _) in module_constants(res.source).items()}
    assert consts == {**consts, **res.constants}
    down = _cost_model(GpuChecker(window_ms=(2.0, 60.0), device="cpu", compile=False), 0.1)
    res = down.check_source(RELU)  # 102 ms: scaled down into the window too
    assert res.runtime == "pass" and res.constants["batch_size"] < 16, res


def test_a_real_cpu_measurement_is_a_positive_time():
    from cuda_agent.synth.gpu import GpuChecker

    torch.set_num_threads(1)
    checker = GpuChecker(device="cpu", compile=False, reps=3, warmup=1)
    assert 0.0 < checker.measure(RELU) < 10_000.0


def test_window_out_of_reach_is_a_recorded_failure():
    from cuda_agent.synth.gpu import GpuChecker

    # No knob: "b_" is not a batch name and 3, 5 are below the size threshold.
    src = RELU.replace("batch_size", "b_").replace("b_ = 16", "b_ = 3").replace("dim = 64", "dim = 5")
    checker = GpuChecker(window_ms=(50.0, 60.0), device="cpu", compile=False, reps=2, warmup=1)
    res = checker.check_source(src)
    assert res.runtime.startswith("fail") and "no size constant" in res.runtime


def test_filter_file_records_outcomes_and_resumes(tmp_path):
    from cuda_agent.synth import SynthConfig, synthesize
    from cuda_agent.synth.gpu import filter_file

    synthesize(SynthConfig(count=3, seed=5, out=tmp_path / "t.jsonl", workers=1, progress=False))
    first = filter_file(tmp_path / "t.jsonl", tmp_path / "g.jsonl", device="cpu", window_ms=(0.05, 1000.0),
                        compile=False, keep_failed=True, progress=False, limit=2)
    assert "2/2 rows checked" in first
    rows = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    for r in rows:
        f = json.loads(r["filters"])
        assert f["runtime"] != "pending" and r["eager_ms"] is not None
    log = tmp_path / "g.jsonl.parts" / "attempts.jsonl"
    assert len(log.read_text().splitlines()) == 2


@pytest.mark.gpu
def test_gpu_check_scales_into_the_window(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from cuda_agent.synth.gpu import GpuChecker, filter_file
    from cuda_agent.synth import SynthConfig, synthesize

    checker = GpuChecker()
    res = checker.check_source(CONV.replace("height, width = 32, 32", "height = 32\nwidth = 32"))
    assert res.eager_ms is not None and res.runtime == "pass", res
    assert res.compile == "pass" and res.compile_ms > 0
    synthesize(SynthConfig(count=3, seed=5, out=tmp_path / "t.jsonl", workers=1, progress=False))
    summary = filter_file(tmp_path / "t.jsonl", tmp_path / "g.jsonl", keep_failed=True, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and "rows checked" in summary
    for r in rows:
        f = json.loads(r["filters"])
        assert f["runtime"] != "pending" and f["compile"] != "pending"


def test_out_of_memory_in_a_compile_worker_is_checked_again_alone():
    from cuda_agent.synth.gpu import retry_out_of_memory

    class Checker:
        calls = []

        def compile_check(self, code, name, timed=True):
            self.calls.append(name)
            return "pass", None

    row = {"code": "x", "name": "t1"}
    oom = "fail: inductor: OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB"
    assert retry_out_of_memory(oom, row, Checker()) == "pass" and Checker.calls == ["t1"]
    assert retry_out_of_memory("fail: inductor output differs from eager", row, Checker()) \
        == "fail: inductor output differs from eager" and Checker.calls == ["t1"]
