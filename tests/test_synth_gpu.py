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
