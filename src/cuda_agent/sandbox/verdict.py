"""The Verdict record: everything the sandbox says about one (task, solution) pair.

Its JSON form (``to_dict``) is the contract with the agent, the benchmark and training;
``FORMAT_VERSION`` changes when a field's meaning changes. Defaults mean "failed".
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

FORMAT_VERSION = 1

CORRECT = "correct"
INCORRECT = "incorrect"
COMPILE_ERROR = "compile_error"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
REJECTED = "rejected"
HARNESS_ERROR = "harness_error"
"""The failure was not the candidate's: the reference Model crashed or hung, a worker was killed from
outside (the out-of-memory killer), or the harness itself raised. Reward null: not a verdict on the
candidate, so training leaves it out and bench retries it once (docs/sandbox.md)."""
VERDICTS = (CORRECT, INCORRECT, COMPILE_ERROR, RUNTIME_ERROR, TIMEOUT, REJECTED, HARNESS_ERROR)


@dataclass
class Verdict:
    verdict: str = RUNTIME_ERROR
    reasons: list[str] = field(default_factory=list)
    """Why the verdict is what it is, one sentence each, most important first."""
    flags: list[str] = field(default_factory=list)
    """Machine-readable marks, e.g. precision_downgrade, excessive_speedup, timing_mismatch."""
    task: str | None = None
    solution: str | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    """max over trials and outputs of ||out - ref|| / ||ref|| (relative L2 norm)."""
    tolerance: float | None = None
    allclose_1e2: bool | None = None
    """Whether torch.allclose(out, ref, atol=1e-2, rtol=1e-2) held on every trial (the paper's test)."""
    num_trials: int = 0
    ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    reward: float | None = -1.0
    """The paper's reward; None (JSON null) for ``harness_error``, which says nothing about the candidate."""
    precision: dict[str, Any] = field(default_factory=dict)
    rules: str = "cuda-agent"
    """The rule set it was judged under (SandboxConfig.rules): 'cuda-agent' or 'kernelbench'."""
    build_s: float | None = None
    eval_s: float | None = None
    baseline_s: float | None = None
    baseline_cached: bool = False
    log: str = ""
    """Compiler or runtime errors trimmed for a reader, file:line kept."""
    gpu: str | None = None
    torch_version: str | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    """Details of the timing: iterations, both clocks, rotation sets."""
    static_findings: list[dict[str, Any]] = field(default_factory=list)
    roofline: dict[str, Any] = field(default_factory=dict)
    """The hardware's limit for this task (sandbox/roofline.py): minimal bytes, FLOPs, the GPU's peaks,
    the lower bound on time, and the fraction of it the candidate, eager and compile reach."""
    confinement: dict[str, Any] = field(default_factory=dict)
    """How the candidate's code was confined (sandbox/confine.py): the mechanism, what it could see, the
    worker's ``process_guard`` and ``landlock`` as it reported them before the candidate's import, and a
    ``warning`` when it ran unconfined (--unsafe-no-isolation)."""
    format_version: int = FORMAT_VERSION

    @property
    def ok(self) -> bool:
        return self.verdict == CORRECT

    @property
    def harness_error(self) -> bool:
        """The harness failed, not the candidate: no reward, no verdict on the candidate."""
        return self.verdict == HARNESS_ERROR

    def reject(self, reason: str, flag: str | None = None) -> None:
        self.verdict = REJECTED
        self.add_reason(reason)
        if flag:
            self.flag(flag)

    def fail(self, verdict: str, reason: str) -> None:
        self.verdict = verdict
        self.add_reason(reason)

    def add_reason(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    def flag(self, name: str) -> None:
        if name not in self.flags:
            self.flags.append(name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, **kw: Any) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Verdict":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def host_bound_shares(block) -> tuple[dict[str, float], float] | None:
    """A verdict's ``timing.host_bound`` block read as ({side: share} for the sides, "candidate" and "eager", whose
    share is a number, threshold); None for a block that is not one (not a dict, or no numeric threshold).
    One reading for the agent's line (timing.host_bound_line) and the calibration report (bench.metrics)."""
    def real(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if not isinstance(block, dict) or not real(block.get("threshold")):
        return None
    return {k: block[k] for k in ("candidate", "eager") if real(block.get(k))}, block["threshold"]
