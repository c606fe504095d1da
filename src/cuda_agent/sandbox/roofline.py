"""Headroom: how close a kernel, eager and torch.compile come to what the GPU can physically do.

A speedup over torch.compile says how a kernel compares with one baseline, not how much is left to
gain. The roofline bound answers that: no implementation of the task can take less time than

    bound_ms = max(minimal bytes / HBM bandwidth, FLOPs / peak FLOP rate)

where the minimal bytes are the task's inputs, parameters and outputs, each moved once (the harness
flushes L2 before every timed call, so they do come from HBM), and the FLOPs are counted on the
reference by torch's own ``torch.utils.flop_counter.FlopCounterMode``, never by hand. A verdict's
``roofline`` block gives the bound and the fraction of it that the candidate, eager and compile reach
(bound_ms / their ms): 1.0 is the hardware's limit, and a fraction above 1.0 is a bug (a timing error,
a wrong peak, or a task that does not touch all of its inputs, so the minimal bytes overstate what must
move); it is flagged, never reported silently.

Convolutions are counted (``conv_flops``) but left out of the compute bound: FlopCounterMode counts the
direct algorithm's FLOPs, and cuDNN's FFT and Winograd algorithms do fewer, so they bound nothing. On an
H100 in strict FP32, KernelBench L1_69 (a 3x5 ConvTranspose2d) ran at 1.45 of them. A task made of
convolutions is then bounded by its bytes and its other FLOPs, a valid but loose lower bound.

What it does not do: count FLOPs of operators FlopCounterMode has no formula for (elementwise ops,
reductions, custom ops). Those are listed in ``uncounted_ops`` and ``flops_counted`` is false: the
compute bound is then an under-estimate, so the bound is still a valid lower bound on time, only a
looser one. Such ops do about one FLOP per element, far below any GPU's ridge point, so for them the
memory bound is the one that matters.

The peaks come from :data:`PEAKS` (vendor datasheets, matched by the device name torch reports) and
the bandwidth also from a copy measured on this very GPU (:func:`measure_copy_bandwidth`, cached with
the baselines); the measured figure is the one the bound uses where there is one, since no kernel can
beat what a plain device-to-device copy reaches.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .inputs import nbytes

# --------------------------------------------------------------------------- GPU peaks


@dataclass(frozen=True)
class GpuPeaks:
    """One GPU's datasheet peaks, dense (no 2:4 sparsity), at boost clock."""

    name: str
    pattern: str
    """Regex matched (case-insensitively) against torch.cuda.get_device_name()."""
    hbm_gbs: float
    """HBM bandwidth, GB/s (1e9 bytes per second)."""
    fp32_tflops: float
    """Strict FP32 on CUDA cores (non-tensor FMA)."""
    tf32_tflops: float
    """TF32 on tensor cores."""
    bf16_tflops: float
    fp16_tflops: float
    fp64_tflops: float
    """FP64 on CUDA cores (non-tensor)."""
    source: str


# Most specific patterns first: "H100 NVL" before "H100", "H200 NVL" before "H200".
# Tensor-core figures on NVIDIA's datasheets are printed with 2:4 sparsity; the dense ones (half) are here.
PEAKS: tuple[GpuPeaks, ...] = (
    # NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200, "H200 NVL" column): 4.8 TB/s HBM3e,
    # FP32 60 TF, TF32 835 TF sparse, BF16/FP16 1,671 TF sparse, FP64 30 TF.
    GpuPeaks("H200 NVL", r"H200 NVL", 4800, 60.0, 417.5, 835.5, 835.5, 30.0,
             "NVIDIA H200 datasheet (H200 NVL), tensor figures halved for dense"),
    # NVIDIA H200 datasheet ("H200 SXM" column): 4.8 TB/s HBM3e, FP32 67 TF, TF32 989 TF sparse,
    # BF16/FP16 1,979 TF sparse, FP64 34 TF. torch reports the SXM part as "NVIDIA H200".
    GpuPeaks("H200 SXM", r"H200", 4800, 67.0, 494.5, 989.5, 989.5, 34.0,
             "NVIDIA H200 datasheet (H200 SXM), tensor figures halved for dense"),
    # NVIDIA H100 datasheet ("H100 NVL" column): 3.9 TB/s HBM3, FP32 60 TF, TF32 835 TF sparse,
    # BF16/FP16 1,671 TF sparse, FP64 30 TF.
    GpuPeaks("H100 NVL", r"H100 NVL", 3900, 60.0, 417.5, 835.5, 835.5, 30.0,
             "NVIDIA H100 datasheet (H100 NVL), tensor figures halved for dense"),
    # NVIDIA H100 datasheet ("H100 PCIe" column): 2 TB/s HBM2e, FP32 51 TF, TF32 756 TF sparse,
    # BF16/FP16 1,513 TF sparse, FP64 26 TF.
    GpuPeaks("H100 PCIe", r"H100 PCIe", 2000, 51.0, 378.0, 756.5, 756.5, 26.0,
             "NVIDIA H100 datasheet (H100 PCIe), tensor figures halved for dense"),
    # NVIDIA H100 datasheet ("H100 SXM" column): 3.35 TB/s HBM3, FP32 67 TF, TF32 989 TF sparse,
    # BF16/FP16 1,979 TF sparse, FP64 34 TF. torch reports it as "NVIDIA H100 80GB HBM3".
    GpuPeaks("H100 SXM", r"H100", 3350, 67.0, 494.5, 989.5, 989.5, 34.0,
             "NVIDIA H100 datasheet (H100 SXM), tensor figures halved for dense"),
    # NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx, 8-GPU figures / 8): 8 TB/s HBM3e,
    # FP32 75 TF (80 at the 1,000 W configuration in the Blackwell datasheet; the lower figure is kept),
    # TF32 2.2 PF sparse, BF16/FP16 4.5 PF sparse, FP64 37 TF.
    GpuPeaks("B200", r"B200", 8000, 75.0, 1100.0, 2250.0, 2250.0, 37.0,
             "NVIDIA HGX B200 specifications (per GPU), tensor figures halved for dense"),
    # NVIDIA A100 datasheet (80GB SXM column): 2,039 GB/s HBM2e, FP32 19.5 TF, TF32 156 TF dense,
    # BF16/FP16 312 TF dense, FP64 9.7 TF. torch: "NVIDIA A100-SXM4-80GB".
    GpuPeaks("A100 SXM 80GB", r"A100.*SXM.*80", 2039, 19.5, 156.0, 312.0, 312.0, 9.7,
             "NVIDIA A100 datasheet (A100 80GB SXM)"),
    # NVIDIA A100 datasheet (80GB PCIe column): 1,935 GB/s. torch: "NVIDIA A100 80GB PCIe".
    GpuPeaks("A100 PCIe 80GB", r"A100.*80", 1935, 19.5, 156.0, 312.0, 312.0, 9.7,
             "NVIDIA A100 datasheet (A100 80GB PCIe)"),
    # NVIDIA A100 datasheet (40GB): 1,555 GB/s HBM2. torch: "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB".
    GpuPeaks("A100 40GB", r"A100", 1555, 19.5, 156.0, 312.0, 312.0, 9.7,
             "NVIDIA A100 datasheet (A100 40GB)"),
)


def peaks_for(device_name: str | None) -> GpuPeaks | None:
    """The table's entry for the GPU torch names ``device_name`` (None: not a GPU we know)."""
    if not device_name:
        return None
    for p in PEAKS:
        if re.search(p.pattern, device_name, re.IGNORECASE):
            return p
    return None


# Which peak applies: the task's compute dtype, and for FP32 the precision mode in force
# (SandboxConfig.precision: 'fp32' is strict FP32 on CUDA cores, 'tf32' lets matmuls use tensor cores).
COMPUTE_UNITS = {
    ("float32", "fp32"): ("fp32_tflops", "FP32 (CUDA cores)"),
    ("float32", "tf32"): ("tf32_tflops", "TF32 (tensor cores)"),
    ("bfloat16", None): ("bf16_tflops", "BF16 (tensor cores)"),
    ("float16", None): ("fp16_tflops", "FP16 (tensor cores)"),
    ("float64", None): ("fp64_tflops", "FP64 (CUDA cores)"),
}


def flop_peak(peaks: GpuPeaks, dtype: str | None, precision: str) -> tuple[float, str]:
    """(TFLOP/s, what it is) for a task computing in ``dtype`` under ``precision``. A task with no
    floating tensor (indices only) is taken at the FP32 rate."""
    key = (dtype or "float32", precision if (dtype or "float32") == "float32" else None)
    if key not in COMPUTE_UNITS:
        raise ValueError(f"no peak FLOP rate for dtype {dtype!r} under precision {precision!r}")
    attr, label = COMPUTE_UNITS[key]
    return getattr(peaks, attr), label


# --------------------------------------------------------------------------- what the task does

NON_COMPUTE_OPS = frozenset({
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten.zeros", "aten.zeros_like", "aten.new_zeros", "aten.ones", "aten.ones_like", "aten.new_ones",
    "aten.full", "aten.full_like", "aten.new_full", "aten.fill", "aten.fill_", "aten.zero_", "aten.scalar_tensor",
    "aten.clone", "aten.copy", "aten.copy_", "aten._to_copy", "aten.detach", "aten.lift_fresh", "aten.alias",
    "aten.contiguous", "aten.resize_", "aten.set_", "aten._local_scalar_dense", "aten.arange",
    "aten.cat", "aten.stack", "aten.constant_pad_nd", "aten.index", "aten.index_select", "aten.gather",
    "aten.repeat", "aten.flip", "aten.roll", "aten.slice_scatter", "aten.select_scatter", "aten.narrow_copy",
    "prim.device", "aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset",
})
"""Operators that allocate, copy or rearrange data but compute nothing: no FLOPs to count (views are
recognized by their schema)."""


@dataclass
class Work:
    """What the reference does in one forward, as FlopCounterMode counts it."""

    flops: int | None = None
    """FLOPs FlopCounterMode counted (a multiply-add is 2); None: the forward could not be counted."""
    counted_ops: dict[str, int] = field(default_factory=dict)
    """Operator -> its FLOPs, for the operators FlopCounterMode has a formula for."""
    uncounted_ops: list[str] = field(default_factory=list)
    """Operators that compute but have no FlopCounterMode formula (elementwise, reductions, custom ops)."""
    dtype: str | None = None
    """The compute dtype: the widest floating dtype among inputs and parameters (None: none floating)."""
    where: str = "meta"
    """'meta': counted on the meta device (shapes only, no memory); 'reference run': on the GPU, during
    the first reference trial (a task whose forward cannot run on the meta device)."""
    error: str | None = None
    input_bytes: int | None = None
    param_bytes: int | None = None
    output_bytes: int | None = None
    """Bytes of one input set, of the state dict and of the output, from the same forward (the evaluator
    uses the figures of the sets it actually drew; ``profile``, which draws no trial, these)."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Work:
        return cls(**d)


class _OpRecorder(TorchDispatchMode):
    """Every ATen operator a forward dispatches (after FlopCounterMode's own decompositions)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, bool] = {}  # name -> is a view

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(getattr(func, "overloadpacket", func))
        if name not in self.ops:
            self.ops[name] = bool(getattr(func, "is_view", False))
        return func(*args, **(kwargs or {}))


class WorkCounter:
    """Counts one forward's FLOPs with FlopCounterMode and notes the operators it has no formula for.

        with WorkCounter() as wc:
            model(*inputs)
        work = wc.work(dtype="float32", where="meta")
    """

    def __enter__(self) -> WorkCounter:
        from torch.utils.flop_counter import FlopCounterMode

        # the recorder sits under the counter, so that it sees the operators the counter decomposes into
        self.recorder = _OpRecorder()
        self.counter = FlopCounterMode(display=False)
        self.recorder.__enter__()
        try:
            self.counter.__enter__()
        except BaseException:
            self.recorder.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.counter.__exit__(*exc)
        finally:
            self.recorder.__exit__(*exc)

    def work(self, dtype: str | None, where: str) -> Work:
        from torch.utils.flop_counter import flop_registry

        counted = {str(op): int(n) for op, n in self.counter.get_flop_counts().get("Global", {}).items()}
        formulas = {str(op) for op in flop_registry}
        uncounted = sorted(name for name, is_view in self.recorder.ops.items()
                           if not is_view and name not in formulas and name not in NON_COMPUTE_OPS)
        return Work(int(self.counter.get_total_flops()), counted, uncounted, dtype, where)


def conv_flops(work: Work) -> int:
    """The FLOPs ``work`` counted in convolution operators (aten.convolution and its variants)."""
    return sum(n for op, n in work.counted_ops.items() if "convolution" in op)


def compute_dtype(*trees) -> str | None:
    """The widest floating dtype among the tensors in ``trees`` ('float32', 'bfloat16', ...)."""
    order = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
    found = [t.dtype for t in _tensors(trees) if t.dtype in order]
    if not found:
        return None
    return str(max(found, key=order.index)).removeprefix("torch.")


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def count_work(task_module, init_inputs: list) -> Work:
    """FLOPs of one reference forward, counted on the meta device: shapes only, so a 16 GiB task
    costs nothing. A task whose forward cannot run there gets ``error`` (the reference worker then
    counts during its first real trial instead)."""
    try:
        with torch.device("meta"):
            inputs = list(task_module.get_inputs())
            model = task_module.Model(*init_inputs)
        params = dict(model.state_dict())
        dtype = compute_dtype(inputs, params)
        with WorkCounter() as wc, torch.no_grad():
            out = model(*inputs)
    except Exception as e:  # noqa: BLE001 - no meta kernel, data-dependent shapes, a named device...
        return Work(where="meta", error=f"{type(e).__name__}: {str(e)[:200]}")
    work = wc.work(dtype, "meta")
    work.input_bytes, work.param_bytes, work.output_bytes = nbytes(inputs), nbytes(params), nbytes(out)
    return work


# --------------------------------------------------------------------------- measured bandwidth

def measure_copy_bandwidth(device: torch.device, nbytes: int = 2 << 30, reps: int = 20) -> dict:
    """HBM bandwidth a streaming kernel reaches here, GB/s: the fastest of ``reps`` runs of each of
    :data:`STREAMS` over ``nbytes`` (each reads its bytes once, and writes as many or none), timed with CUDA
    events. The fastest of them all, not a median, and of more than one kernel: a bound must be what the GPU
    can do, so that no task's kernel timed later (a median, after an L2 flush) can exceed it. A plain byte copy
    alone (``cudaMemcpy``) was not enough: on an H100 an FP32 ReLU over 6 GiB (KernelBench L1_19) came to 1.00
    of it; nor were streams that write as much as they read: torch.compile's MSE loss, which reads 8 GiB and
    writes a scalar (L1_94), came to 1.006 of them. Smaller when free memory is short (at least 256 MiB, far
    above any L2)."""
    free, _total = torch.cuda.mem_get_info(device)
    n = min(nbytes, free // 4) // 4096 * 4096
    if n < 256 << 20:
        raise torch.OutOfMemoryError(f"only {free >> 20} MiB free: too little for a bandwidth measurement")
    src = torch.empty(n, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    per: dict[str, dict] = {}
    for name, (run, moved) in STREAMS.items():
        for _ in range(3):
            run(src, dst)
        torch.cuda.synchronize(device)
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run(src, dst)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        per[name] = {"gbs": round(moved * n / (times[0] * 1e-3) / 1e9, 1),
                     "median_gbs": round(moved * n / (times[len(times) // 2] * 1e-3) / 1e9, 1),
                     "best_ms": round(times[0], 4), "median_ms": round(times[len(times) // 2], 4)}
    del src, dst
    best = max(per, key=lambda k: per[k]["gbs"])
    return {"gbs": per[best]["gbs"], "median_gbs": per[best]["median_gbs"], "fastest": best, "streams": per,
            "bytes": n, "best_ms": per[best]["best_ms"], "median_ms": per[best]["median_ms"], "reps": reps,
            "method": "the fastest of: " + ", ".join(STREAMS) + " (device to device), CUDA events, fastest of reps"}


STREAMS = {
    "copy_ (cudaMemcpy, bytes)": (lambda src, dst: dst.copy_(src), 2),
    "neg (elementwise kernel, float32)": (
        lambda src, dst: torch.neg(src.view(torch.float32), out=dst.view(torch.float32)), 2),
    "sum (read-only reduction, float32)": (lambda src, dst: torch.sum(src.view(torch.float32)), 1),
}
"""Streaming kernels whose fastest run is the measured bandwidth: name -> (run(src, dst), bytes moved per byte
of ``src``): each reads n bytes and writes n (2) or a scalar (1)."""


# --------------------------------------------------------------------------- the bound and fractions

ABOVE_BOUND = "roofline_above_bound"
"""The verdict flag of a fraction above 1.0 (see the module docstring)."""
OFF_SPEC = "bandwidth_off_spec"
"""The verdict flag of a measured bandwidth outside SPEC_RANGE of the datasheet's."""
SPEC_RANGE = (0.5, 1.05)
"""A measured bandwidth outside this share of the datasheet's figure is said in the warning."""


@dataclass
class Roofline:
    """The ``roofline`` block of a verdict. Times in ms, bandwidths in GB/s, FLOP rates in TFLOP/s."""

    gpu: str | None = None
    """The table's name for the GPU (None: not in :data:`PEAKS`)."""
    peaks_source: str | None = None
    input_bytes: int = 0
    param_bytes: int = 0
    """Parameters and buffers (the state dict)."""
    output_bytes: int = 0
    total_bytes: int = 0
    flops: int | None = None
    flops_counted: bool = False
    """True when FlopCounterMode had a formula for every operator that computes."""
    conv_flops: int = 0
    """The part of ``flops`` in convolutions: not in the compute bound (see the module docstring)."""
    flops_note: str | None = None
    flops_counted_on: str | None = None
    """'meta' (the meta device) or 'reference run' (the first reference trial): Work.where."""
    uncounted_ops: list[str] = field(default_factory=list)
    compute_unit: str | None = None
    peak_tflops: float | None = None
    hbm_gbs_spec: float | None = None
    hbm_gbs_measured: float | None = None
    hbm_gbs: float | None = None
    """The bandwidth the bound uses: the measured one where there is one, else the datasheet's."""
    memory_bound_ms: float | None = None
    compute_bound_ms: float | None = None
    bound_ms: float | None = None
    bound: str | None = None
    """'memory' or 'compute': which limit the bound is."""
    fraction: float | None = None
    """bound_ms / the candidate's ms (correct verdicts only)."""
    eager_fraction: float | None = None
    compile_fraction: float | None = None
    warning: str | None = None
    note: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def fractions(self) -> dict[str, float]:
        return {who: f for who, f in (("candidate", self.fraction), ("eager", self.eager_fraction),
                                      ("compile", self.compile_fraction)) if f is not None}

    @property
    def bandwidth_share(self) -> float | None:
        """The measured bandwidth as a share of the datasheet's."""
        if not self.hbm_gbs_measured or not self.hbm_gbs_spec:
            return None
        return self.hbm_gbs_measured / self.hbm_gbs_spec

    @property
    def flags(self) -> list[str]:
        """The verdict flags this block calls for: a fraction above 1.0, a bandwidth off the datasheet."""
        flags = [ABOVE_BOUND] if any(f > 1.0 for f in self.fractions.values()) else []
        share = self.bandwidth_share
        if share is not None and not SPEC_RANGE[0] <= share <= SPEC_RANGE[1]:
            flags.append(OFF_SPEC)
        return flags


def assess(*, gpu_name: str | None, precision: str, work: Work | None, input_bytes: int, param_bytes: int,
           output_bytes: int, measured_gbs: float | None = None, ms: float | None = None,
           eager_ms: float | None = None, compile_ms: float | None = None) -> Roofline:
    """The bound these bytes and FLOPs imply on this GPU, and the fraction of it each time reaches."""
    r = Roofline(input_bytes=input_bytes, param_bytes=param_bytes, output_bytes=output_bytes,
                 total_bytes=input_bytes + param_bytes + output_bytes, hbm_gbs_measured=measured_gbs)
    dtype = None
    if work is None or work.flops is None:
        r.flops_note = ("FLOPs not counted: " + work.error) if work and work.error else "FLOPs not counted"
    else:
        r.flops, r.uncounted_ops, r.flops_counted_on = work.flops, list(work.uncounted_ops), work.where
        dtype = work.dtype
        r.flops_counted = not work.uncounted_ops
        r.conv_flops = conv_flops(work)
        notes = []
        if work.uncounted_ops:
            notes.append(f"FlopCounterMode has no formula for {', '.join(work.uncounted_ops[:8])}: their FLOPs are "
                         "left out, so the compute bound is an under-estimate (the bound stays a lower bound)")
        if r.conv_flops:
            notes.append(f"the convolutions' {r.conv_flops:.3g} FLOPs (the direct algorithm's) are left out of the "
                         "compute bound: FFT and Winograd algorithms do fewer")
        r.flops_note = "; ".join(notes) or None
    peaks = peaks_for(gpu_name)
    if peaks is not None:
        r.gpu, r.peaks_source, r.hbm_gbs_spec = peaks.name, peaks.source, peaks.hbm_gbs
        r.peak_tflops, r.compute_unit = flop_peak(peaks, dtype, precision)
    r.hbm_gbs = measured_gbs or r.hbm_gbs_spec
    if r.hbm_gbs is None:
        r.note = f"no peaks known for {gpu_name!r} and no measured bandwidth: no bound"
        return r
    r.memory_bound_ms = r.total_bytes / (r.hbm_gbs * 1e9) * 1e3
    if r.flops is not None and r.peak_tflops:
        r.compute_bound_ms = (r.flops - r.conv_flops) / (r.peak_tflops * 1e12) * 1e3
    elif peaks is None:
        r.note = f"no FLOP peak known for {gpu_name!r}: the bound is the memory bound alone"
    r.bound_ms = max(r.memory_bound_ms, r.compute_bound_ms or 0.0)
    r.bound = "compute" if (r.compute_bound_ms or 0.0) > r.memory_bound_ms else "memory"
    r.fraction, r.eager_fraction, r.compile_fraction = (fraction(r.bound_ms, t) for t in (ms, eager_ms, compile_ms))
    r.warning = _warning(r)
    r.memory_bound_ms, r.compute_bound_ms, r.bound_ms = (None if x is None else float(f"{x:.6g}") for x in
                                                         (r.memory_bound_ms, r.compute_bound_ms, r.bound_ms))
    return r


def fraction(bound_ms: float | None, ms: float | None) -> float | None:
    """The share of the bound a time reaches (1.0: at the hardware's limit)."""
    if bound_ms is None or not ms or ms <= 0:
        return None
    return float(f"{bound_ms / ms:.4g}")  # significant digits: a 5 us launch on a 5 ns bound is 0.001, not 0


def _warning(r: Roofline) -> str | None:
    said = []
    above = [(who, f) for who, f in r.fractions.items() if f > 1.0]
    if above:
        said.append(", ".join(f"{who} at {f:.2f}x" for who, f in above)
                    + f" of the {r.bound} bound ({r.bound_ms:.4g} ms): faster than the hardware allows, so the bound "
                    "is wrong here (a timing error, a wrong peak, or a task that does not touch all of its inputs)")
    if OFF_SPEC in r.flags:
        said.append(f"the measured bandwidth {r.hbm_gbs_measured:.0f} GB/s is {r.bandwidth_share:.0%} of the "
                    f"datasheet's {r.hbm_gbs_spec:.0f} GB/s")
    return "; ".join(said) or None


def summary_line(block: dict | None) -> str | None:
    """One line for the agent, e.g. "at 38% of the H200 SXM's memory-bandwidth bound (eager: 20%,
    compile: 41%)"; None when the verdict has no bound."""
    if not block or block.get("bound_ms") is None:
        return None
    what = "memory-bandwidth" if block.get("bound") == "memory" else "compute"
    gpu = f"the {block['gpu']}'s" if block.get("gpu") else "this GPU's measured"
    base = [f"{who}: {block[k]:.0%}" for who, k in (("eager", "eager_fraction"), ("compile", "compile_fraction"))
            if block.get(k) is not None]
    head = f"at {block['fraction']:.0%} of" if block.get("fraction") is not None else "the bound:"
    line = f"{head} {gpu} {what} bound of {block['bound_ms']:.4g} ms" + (f" ({', '.join(base)})" if base else "")
    if block.get("warning"):
        line += f" WARNING: {block['warning']}"
    return line
