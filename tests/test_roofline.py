"""The roofline block's pure parts (sandbox/roofline.py): the GPU table, FLOP counting with FlopCounterMode
on the meta device and on a real run, the bound and the fractions, hand-computed; the bandwidth cache."""

import types

import pytest

from cuda_agent.sandbox import roofline as R
from cuda_agent.sandbox.baselines import BaselineStore


def _task(source: str) -> types.ModuleType:
    module = types.ModuleType("task")
    exec("import torch\nimport torch.nn as nn\n" + source, module.__dict__)
    return module


@pytest.mark.parametrize("name, entry", [
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA B200", "B200"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA A100-PCIE-40GB", "A100 40GB"),
])
def test_the_gpu_table_matches_the_names_torch_reports(name, entry):
    assert R.peaks_for(name).name == entry


def test_an_unknown_gpu_has_no_peaks():
    assert R.peaks_for("NVIDIA GeForce RTX 4090") is None and R.peaks_for(None) is None


def test_every_table_entry_is_sourced_and_ordered_fp32_below_tensor_cores():
    for p in R.PEAKS:
        assert p.source and p.hbm_gbs > 1000
        assert p.fp64_tflops <= p.fp32_tflops < p.tf32_tflops < p.bf16_tflops == p.fp16_tflops


def test_the_peak_follows_the_dtype_and_the_precision_mode():
    h200 = R.peaks_for("NVIDIA H200")
    assert R.flop_peak(h200, "float32", "fp32") == (67.0, "FP32 (CUDA cores)")
    assert R.flop_peak(h200, "float32", "tf32") == (494.5, "TF32 (tensor cores)")
    assert R.flop_peak(h200, "bfloat16", "fp32")[0] == R.flop_peak(h200, "bfloat16", "tf32")[0] == 989.5
    assert R.flop_peak(h200, "float16", "fp32")[0] == 989.5
    assert R.flop_peak(h200, None, "fp32")[0] == 67.0  # indices only: the FP32 rate
    with pytest.raises(ValueError, match="float8"):
        R.flop_peak(h200, "float8", "fp32")


LINEAR = """
class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)
    def forward(self, x):
        return self.fc(x)
def get_inputs():
    return [torch.randn(64, 128)]
"""


def test_a_linear_layers_flops_are_counted_on_the_meta_device():
    w = R.count_work(_task(LINEAR), [128, 32])
    assert w.error is None and w.where == "meta" and w.dtype == "float32"
    assert w.flops == 2 * 64 * 128 * 32 and w.counted_ops == {"aten.addmm": 2 * 64 * 128 * 32}
    assert w.uncounted_ops == []  # the transpose is a view, the bias is part of addmm
    assert (w.input_bytes, w.param_bytes, w.output_bytes) == (64 * 128 * 4, (128 * 32 + 32) * 4, 64 * 32 * 4)


def test_a_convolutions_flops_are_counted_and_elementwise_ops_are_named_not_guessed():
    task = _task("""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, bias=False)
    def forward(self, x):
        return torch.relu(self.conv(x)) * 2
def get_inputs():
    return [torch.randn(2, 3, 10, 10, dtype=torch.float16)]
""")
    w = R.count_work(task, [])
    assert w.flops == 2 * (2 * 8 * 8 * 8) * (3 * 3 * 3)  # 2 x outputs x (C_in x k x k)
    assert w.uncounted_ops == ["aten.mul", "aten.relu"]
    assert w.dtype == "float32"  # the conv's weight is FP32: the widest floating dtype counts


def test_moving_data_is_not_an_uncounted_computation():
    task = _task("""
class Model(nn.Module):
    def forward(self, a, b):
        x = torch.cat([a, b], dim=1).permute(1, 0).contiguous()
        return torch.nn.functional.pad(x, (1, 1))[:, 1:-1].flip(0)
def get_inputs():
    return [torch.randn(8, 4), torch.randn(8, 4)]
""")
    w = R.count_work(task, [])
    assert w.error is None and w.flops == 0 and w.uncounted_ops == []


def test_a_16_gib_task_is_counted_without_allocating_it():
    task = _task("""
class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)
def get_inputs():
    return [torch.randn(64, 8192, 4096), torch.randn(64, 4096, 4096)]
""")
    w = R.count_work(task, [])  # 8 GiB + 4 GiB of inputs, 8 GiB of output: on the meta device, none of it
    assert w.flops == 2 * 64 * 8192 * 4096 * 4096 and w.error is None


def test_a_forward_the_meta_device_cannot_run_is_an_error_then_counted_on_a_real_run():
    task = _task("""
class Model(nn.Module):
    def forward(self, x):
        k = int(x.abs().sum().item() > 0) + 1  # data-dependent: no value on the meta device
        return (x @ x.T) * k
def get_inputs():
    return [torch.randn(16, 8)]
""")
    w = R.count_work(task, [])
    assert w.flops is None and w.where == "meta" and w.error
    x = task.get_inputs()[0]
    with R.WorkCounter() as wc:
        task.Model()(x)
    real = wc.work(R.compute_dtype([x]), "reference run")
    assert real.flops == 2 * 16 * 8 * 16 and real.where == "reference run"
    assert {"aten.abs", "aten.sum", "aten.mul"} <= set(real.uncounted_ops)


def _work(flops, uncounted=(), dtype="float32"):
    return R.Work(flops=flops, uncounted_ops=list(uncounted), dtype=dtype)


def test_a_memory_bound_task_bound_and_fractions_by_hand():
    # 1 GB in, 1 GB out, no parameters, on the H200's datasheet 4800 GB/s: 2e9 / 4.8e12 s = 0.41667 ms
    r = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(1_000_000_000), input_bytes=10**9,
                 param_bytes=0, output_bytes=10**9, ms=0.5, eager_ms=1.0, compile_ms=0.625)
    assert r.gpu == "H200 SXM" and r.hbm_gbs == r.hbm_gbs_spec == 4800 and r.hbm_gbs_measured is None
    assert r.memory_bound_ms == pytest.approx(2e9 / 4.8e12 * 1e3, rel=1e-5)
    assert r.compute_bound_ms == pytest.approx(1e9 / 67e12 * 1e3, rel=1e-5)  # 0.0149 ms: far below
    assert r.bound == "memory" and r.bound_ms == r.memory_bound_ms
    assert (r.fraction, r.eager_fraction, r.compile_fraction) == (0.8333, 0.4167, 0.6667)
    assert r.flops_counted and r.warning is None and r.flags == []


def test_a_compute_bound_task_uses_the_tensor_core_peak_under_tf32():
    # a 4096^3 GEMM: 2 x 4096^3 = 137.4 GFLOP; TF32 on the H100 SXM: 494.5 TFLOP/s -> 0.2779 ms
    flops = 2 * 4096 ** 3
    nbytes = 3 * 4096 * 4096 * 4
    r = R.assess(gpu_name="NVIDIA H100 80GB HBM3", precision="tf32", work=_work(flops), input_bytes=2 * nbytes // 3,
                 param_bytes=0, output_bytes=nbytes // 3, measured_gbs=3000.0, ms=0.4, compile_ms=0.35)
    assert r.compute_unit == "TF32 (tensor cores)" and r.bound == "compute"
    assert r.bound_ms == pytest.approx(flops / 494.5e12 * 1e3, rel=1e-5)
    assert r.hbm_gbs == 3000.0  # the measured bandwidth, not the datasheet's, bounds the memory side
    assert r.memory_bound_ms == pytest.approx(nbytes / 3e12 * 1e3, rel=1e-5)
    assert r.fraction == pytest.approx(r.bound_ms / 0.4, rel=1e-3) and r.eager_fraction is None
    tiny = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(0), input_bytes=4800, param_bytes=0,
                    output_bytes=0, ms=0.005)  # a 1 ns bound, a 5 us launch: small, never rounded to 0
    assert tiny.fraction == 0.0002


def test_a_fraction_above_one_is_flagged_with_its_reason():
    r = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(0), input_bytes=4800 * 10**6,
                 param_bytes=0, output_bytes=0, ms=0.5, eager_ms=2.0)  # bound 1 ms, candidate at 0.5 ms
    assert r.fraction == 2.0 and r.flags == [R.ABOVE_BOUND]
    assert "candidate at 2.00x" in r.warning and "eager" not in r.warning
    assert "WARNING" in R.summary_line(r.to_dict())


def test_a_measured_bandwidth_off_the_datasheet_is_said():
    r = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(0), input_bytes=10**6, param_bytes=0,
                 output_bytes=0, measured_gbs=1200.0)
    assert r.flags == [R.OFF_SPEC] and "25% of the datasheet" in r.warning
    ok = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(0), input_bytes=10**6, param_bytes=0,
                  output_bytes=0, measured_gbs=4300.0)
    assert ok.flags == [] and ok.warning is None


def test_uncounted_ops_make_the_flops_partial_and_say_so():
    r = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(100, ["aten.relu"]), input_bytes=10**6,
                 param_bytes=0, output_bytes=10**6)
    assert not r.flops_counted and r.uncounted_ops == ["aten.relu"] and "aten.relu" in r.flops_note
    r = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=R.Work(error="RuntimeError: x"), input_bytes=10**6,
                 param_bytes=0, output_bytes=0)
    assert r.flops is None and not r.flops_counted and "RuntimeError" in r.flops_note
    assert r.bound == "memory" and r.compute_bound_ms is None  # the memory bound still holds


def test_a_convolutions_flops_are_not_in_the_compute_bound():
    """cuDNN's FFT and Winograd algorithms do fewer FLOPs than the direct count: on an H100 in strict FP32, L1_69
    (ConvTranspose2d 3x5, 515 GFLOP direct) ran eager at 5.36 ms, 1.43x its direct-FLOP bound of 7.69 ms."""
    work = R.Work(flops=515_396_075_520 + 10**9, counted_ops={"aten.convolution": 515_396_075_520,
                                                               "aten.addmm": 10**9}, dtype="float32")
    r = R.assess(gpu_name="NVIDIA H100 80GB HBM3", precision="fp32", work=work, input_bytes=536_870_912,
                 param_bytes=491_520, output_bytes=1_107_558_400, measured_gbs=3018.6, ms=5.36, eager_ms=5.36)
    assert r.conv_flops == 515_396_075_520 and r.flops == 516_396_075_520
    assert r.compute_bound_ms == pytest.approx(1e9 / 67e12 * 1e3, rel=1e-4)  # the addmm's alone
    assert r.bound == "memory" and r.fraction < 1 and r.flags == []
    assert "convolutions" in r.flops_note and "Winograd" in r.flops_note
    assert R.conv_flops(R.Work(flops=10, counted_ops={"aten.mm": 10})) == 0


def test_an_unknown_gpu_is_bounded_by_its_measured_bandwidth_alone_or_not_at_all():
    none = R.assess(gpu_name="NVIDIA GeForce RTX 4090", precision="fp32", work=_work(10**12), input_bytes=10**9,
                    param_bytes=0, output_bytes=0, ms=1.0)
    assert none.bound_ms is None and none.fraction is None and "no peaks known" in none.note
    assert R.summary_line(none.to_dict()) is None
    mem = R.assess(gpu_name="NVIDIA GeForce RTX 4090", precision="fp32", work=_work(10**12), input_bytes=10**9,
                   param_bytes=0, output_bytes=0, measured_gbs=1000.0, ms=2.0)
    assert mem.bound_ms == 1.0 and mem.fraction == 0.5 and "memory bound alone" in mem.note
    assert R.summary_line(mem.to_dict()).startswith("at 50% of this GPU's measured memory-bandwidth bound")


def test_the_agents_line():
    r = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(0), input_bytes=4800 * 10**6, param_bytes=0,
                 output_bytes=0, ms=2.5, eager_ms=5.0, compile_ms=2.4390243)
    assert R.summary_line(r.to_dict()) == ("at 40% of the H200 SXM's memory-bandwidth bound of 1 ms "
                                           "(eager: 20%, compile: 41%)")
    failed = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(0), input_bytes=4800 * 10**6,
                      param_bytes=0, output_bytes=0, compile_ms=2.0)
    assert R.summary_line(failed.to_dict()) == "the bound: the H200 SXM's memory-bandwidth bound of 1 ms (compile: 50%)"


def test_the_measured_bandwidth_is_cached_per_gpu_and_torch(tmp_path):
    store = BaselineStore(tmp_path / "baselines.sqlite")
    assert store.get_bandwidth("NVIDIA H200", "2.9") is None
    store.put_bandwidth("NVIDIA H200", "2.9", 4310.5, {"bytes": 1 << 30})
    assert store.get_bandwidth("NVIDIA H200", "2.9") == 4310.5
    assert store.get_bandwidth("NVIDIA H200", "2.10") is None and store.get_bandwidth("NVIDIA H100", "2.9") is None
    assert BaselineStore(tmp_path / "baselines.sqlite").get_bandwidth("NVIDIA H200", "2.9") == 4310.5  # reopened


def test_profile_bounds_each_targets_kernel_time_with_the_meta_count(tmp_path):
    """``profile`` has no verdict: its bound comes from the reference worker's meta-device count, its times
    are each target's kernel time per call, and a bandwidth measured earlier is read from the cache."""
    from cuda_agent.sandbox.config import SandboxConfig
    from cuda_agent.sandbox.profiling import KernelRow, ProfileReport, _roofline

    work = R.count_work(_task(LINEAR), [128, 32])
    setup = {"work": work.to_dict(), "gpu": "NVIDIA H200", "torch": "2.9"}
    report = ProfileReport(eager=[KernelRow("gemm", 1, 2.0, 1.0)], compile=[KernelRow("gemm", 1, 1.0, 1.0)],
                           candidate=[KernelRow("mine", 1, 0.5, 0.4), KernelRow("mine2", 1, 0.5, 0.6)])
    BaselineStore(tmp_path / "baselines.sqlite").put_bandwidth("NVIDIA H200", "2.9", 4000.0)
    block = _roofline(setup, SandboxConfig(cache_dir=tmp_path), report)
    nbytes = work.input_bytes + work.param_bytes + work.output_bytes
    assert block["hbm_gbs"] == 4000.0 and block["total_bytes"] == nbytes
    assert block["memory_bound_ms"] == pytest.approx(nbytes / 4e12 * 1e3, rel=1e-5)
    assert block["bound"] == "memory" and block["bound_ms"] == block["memory_bound_ms"]  # 0.5 MFLOP: no contest
    assert block["fraction"] == pytest.approx(block["bound_ms"] / 1e-3, rel=1e-3)  # 1 us of kernels per call
    assert block["compile_fraction"] == pytest.approx(block["bound_ms"] / 1e-3, rel=1e-3)
    assert block["eager_fraction"] == pytest.approx(block["bound_ms"] / 2e-3, rel=1e-3)
    assert _roofline({"work": R.Work(error="x").to_dict(), "gpu": "g", "torch": "t"}, SandboxConfig(cache_dir=tmp_path),
                     report) is None


def test_cuda_agent_evals_summary_has_the_headroom_line():
    from cuda_agent.sandbox import Verdict
    from cuda_agent.sandbox.commands.eval_cmd import summarize

    block = R.assess(gpu_name="NVIDIA H200", precision="fp32", work=_work(0), input_bytes=4800 * 10**6, param_bytes=0,
                     output_bytes=0, ms=2.0, compile_ms=2.0).to_dict()
    text = summarize(Verdict(verdict="correct", ms=2.0, compile_ms=2.0, roofline=block))
    assert "headroom: at 50% of the H200 SXM's memory-bandwidth bound of 1 ms (compile: 50%)" in text
    assert "headroom" not in summarize(Verdict(verdict="compile_error"))
    bound = {"host_bound": {"candidate": 0.5, "eager": 0.93, "threshold": 0.7}}  # eager alone host-bound: still said
    assert "host-bound eager: its launch took 93% of its GPU time (yours: 50%)" in \
        summarize(Verdict(verdict="correct", ms=2.0, timing=bound))
    assert "host-bound" not in text
