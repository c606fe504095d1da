"""Sandbox configuration: one dataclass, every field documented, defaults that hold up."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

PRECISIONS = ("fp32", "tf32")
RULE_SETS = ("cuda-agent", "kernelbench")
"""The static rules' rule sets (static.RULES says which rule belongs to which)."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("CUDA_AGENT_CACHE", Path.home() / ".cache" / "cuda_agent"))


@dataclass
class SandboxConfig:
    """How one evaluation is run. The defaults are the strict, honest setting."""

    precision: str = "fp32"
    """'fp32': baseline and candidate in strict FP32 (no TF32 anywhere); a candidate whose error
    only fits TF32/half levels is rejected as a precision downgrade. 'tf32': eager and compile
    are allowed TF32 too, so TF32 kernels are compared fairly."""
    num_trials: int = 5
    """Correctness trials before timing, fresh seeds each; they alternate the task's own
    get_inputs() distribution with signed standard-normal inputs, and some reuse the previous
    trial's buffers (same addresses, new values) to defeat pointer-keyed caches."""
    num_recheck: int = 2
    """Extra trials after timing, written into the very buffers that timing used."""
    warmup_ms: float = 100.0
    """Least warm-up before timing (after one untimed call); it goes on until per-call times settle
    (see timing.plan_iterations), so that clocks ramping up from idle stay out of the figure."""
    rep_ms: float = 200.0
    """Timing budget; the iteration count is derived from it and clamped to [min_iters, max_iters]."""
    min_iters: int = 10
    max_iters: int = 2000
    max_window_ms: float = 1000.0
    """Upper bound on one measurement's timed window: a long kernel gets fewer calls than min_iters
    (at least timing.MIN_TIMED_CALLS), so that a 50 ms kernel does not cost seconds per baseline."""
    rotate_bytes: int = 512 << 20
    """Upper bound on the memory spent on rotated input sets: 2 to 4 sets while two fit, else one
    (inputs.rotation_sets)."""
    build_timeout_s: float = 300.0
    run_timeout_s: float = 180.0
    """Per worker request (import, a trial batch, a timing run)."""
    candidate_host_memory_gb: float | None = 32.0
    """Host memory (RSS of the candidate worker and every process it started) beyond which the harness
    stops the candidate: a runtime error (-1), the candidate's doing. Without it, a candidate could
    exhaust host memory until the out-of-memory killer ended it, and pass that for the harness's
    trouble (a null reward). Inputs and outputs stay on the GPU, so an honest candidate needs little.
    None: no limit."""
    baseline_timeout_s: float = 900.0
    """The reference worker compiles with torch.compile, which can take minutes."""
    gpu_memory_wait_s: float = 900.0
    """How long an evaluation waits for other evaluations on its GPU to leave it the memory it expects to
    need (gpu.GpuMemory); after that it goes on without, and ``timing.gpu_memory`` says so."""
    quiet_wait_s: float = 900.0
    """How long an evaluation waits, before timing the baselines, for the candidate code of other evaluations on
    its GPU (and agents' commands) to end (gpu.GpuLock.quiet); after that it times them anyway, does not cache
    them, and ``timing.quiet`` says so."""
    excessive_speedup: float = 10.0
    """A speedup over eager above this is flagged and re-checked with extra trials."""
    strict: bool = True
    """Dynamic guards (dispatch guard, integrity checks, kernel census) on. Off only to measure
    their cost; static rules always run."""
    static_rules: bool = True
    """Apply the static honesty rules. Off only in tests that prove each dynamic defense holds on
    its own (syntax and layout problems are still reported)."""
    rules: str = "cuda-agent"
    """The rule set. 'cuda-agent' (the paper's): forward runs only the candidate's own kernels, torch may
    allocate and reshape. 'kernelbench': torch ops and layers may run in forward beside the candidate's
    kernels (the dispatch guard's torch_compute and the census's torch-kernel rejection are off), but at
    least one of the candidate's own kernels must run; every other static rule and dynamic defense holds."""
    calibrate: bool = False
    """Evaluate the task's own Model as the candidate, skipping the torch-op rules
    (speedup_vs_eager should come out at 1.00)."""
    use_baseline_cache: bool = True
    seed: int | None = None
    """Seed of the trial inputs; None draws a fresh one per evaluation (the default)."""
    profile: bool = True
    """Take a short torch.profiler trace of the candidate: it feeds the kernel census (strict)
    and the verdict's ``profile`` table."""
    spare_workers: int = 0
    """Worker processes kept started ahead of need (see process.start_worker): for long-lived callers
    that evaluate again and again (bench, agent, evaluation service); 0 for one-shot evaluations."""
    device: int = 0
    cache_dir: Path = field(default_factory=default_cache_dir)
    arch: str | None = None
    """CUDA target to build for, taken as given, e.g. '90a' or '80' ('90' builds Hopper without its
    arch-specific instructions). None: the GPU's (gpu.build_arch: '90a' on 9.0, '100a' on 10.0, else
    plain), or '90a' on a host without one."""
    isolation: str = "bwrap"
    """'bwrap': builds, the candidate worker and the agent's bash run confined (sandbox/confine.py), and
    an evaluation refuses to start where confinement cannot be set up. 'none' (--unsafe-no-isolation):
    unconfined, with a warning in every verdict."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.rules not in RULE_SETS:
            raise ValueError(f"rules must be one of {RULE_SETS}, got {self.rules!r}")
        if self.arch is not None and not re.fullmatch(r"\d{2,3}[a-z]?", self.arch):
            raise ValueError(f"arch must look like '90a' or '80', got {self.arch!r}")
        if self.isolation not in ("bwrap", "none"):
            raise ValueError(f"isolation must be 'bwrap' or 'none', got {self.isolation!r}")
        if self.num_trials < 1:
            raise ValueError("num_trials must be >= 1")
        self.cache_dir = Path(self.cache_dir)
