"""The benchmark's numbers, each a small function with its definition beside it.

Everything is computed over *attempts*: one attempt is one (task, sample) row of a run. With one
sample per task (the paper's setting) an attempt is a task. With several samples per task every
sample counts once, so a rate is the expected rate of a single sample (pass@1 style).

* **pass rate**: correct attempts / all attempts. A task with no solution, a compile error, a
  crash, a wrong output or a rejected cheat is an attempt that did not pass.
* **faster rate vs X** (the paper's): attempts that are correct AND faster than X by more than
  5% (``speedup_vs_X > 1.05``), over all attempts. The *strict* variant uses ``> 1.0``.
* **speed-up vs X** (the paper's geomean): geometric mean of ``speedup_vs_X`` over the correct
  attempts only (failed attempts are left out, not counted as 0 or 1); ``None`` when no attempt
  is correct. Against compile, correct attempts without a compile baseline are left out too.
* **fast_p** (KernelBench's): attempts that are correct AND have ``speedup > p``, over all
  attempts; ``fast_0`` is the pass rate restricted to attempts that have a speed-up at all.
* **overall**: the same functions over the attempts of every level pooled together, i.e. the
  level figures averaged with weights equal to their task counts.
* **harness errors**: attempts whose final verdict is ``harness_error`` (the reference crashed, a
  worker was killed from outside, the harness raised; bench has evaluated each once more). They
  are counted apart, and stay in the denominator of every rate as attempts that did not pass: a
  run cannot look better by failing in the harness. ``retried``: attempts bench evaluated twice.
* **fraction of the bound** (the verdict's ``roofline`` block, sandbox/roofline.py): the least time the
  GPU allows for the task (its minimal bytes at HBM bandwidth, or its FLOPs at the peak rate, whichever
  is larger) over the time taken; 1.0 is the hardware's limit. Its geometric mean is taken over the
  correct attempts that have both the candidate's and compile's fraction, for both, so the two figures
  are of the same tasks. A fraction above 1.0 is a bug the verdict flags (``roofline_above_bound``); the
  attempts so flagged are counted, never left out silently.
* **GPU-busy share**: per GPU, the union of the intervals in which some evaluation held the sandbox's GPU
  lock (``timing.gpu_lock_intervals``; overlapping holds of concurrent lanes count once) over the union of
  the intervals in which some evaluation was running on it (each attempt's start to finish; the gaps
  between the calls of a resumed run are not counted), summed over GPUs.
* **calibration** (``bench --calibrate``): each task's own Model timed as the candidate; the share
  of tasks whose speed-up vs eager lies within 1.00 +- 0.03 says how far the harness itself moves
  the figures.

X is ``eager`` (PyTorch eager, KernelBench's baseline) or ``compile`` (``torch.compile``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..sandbox.verdict import host_bound_shares

PAPER_MARGIN = 1.05
"""The paper counts a kernel as faster than a baseline when it is more than 5% faster."""
STRICT_MARGIN = 1.0
FAST_P = (0.0, 0.5, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile")
ROOFLINE_KEYS = {"candidate": "fraction", "eager": "eager_fraction", "compile": "compile_fraction"}
"""Who reaches what fraction of the roofline bound: the keys of a verdict's ``roofline`` block."""
ABOVE_BOUND = "roofline_above_bound"


def roofline_fraction(verdict: dict[str, Any], who: str) -> float | None:
    """The fraction of the bound ``who`` (candidate, eager, compile) reaches, from a verdict's roofline
    block; the candidate's only when the verdict is correct."""
    if who == "candidate" and verdict.get("verdict") != "correct":
        return None
    value = (verdict.get("roofline") or {}).get(ROOFLINE_KEYS[who])
    return value if isinstance(value, (int, float)) and value > 0 else None


@dataclass(frozen=True)
class Attempt:
    """What the metrics need from one (task, sample) row."""

    correct: bool
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    harness_error: bool = False
    """The final verdict was harness_error: not the candidate's failure (it still did not pass)."""
    retried: bool = False
    """Bench evaluated it twice, the first evaluation being a harness_error."""
    fraction: float | None = None
    """The candidate's fraction of the roofline bound (correct attempts only)."""
    compile_fraction: float | None = None
    above_bound: bool = False
    """The verdict flags a fraction above 1.0 of the bound (a bug; see sandbox/roofline.py)."""

    def speedup(self, baseline: str) -> float | None:
        if baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
        return self.speedup_vs_eager if baseline == "eager" else self.speedup_vs_compile

    @classmethod
    def from_verdict(cls, verdict: dict[str, Any]) -> Attempt:
        flags = verdict.get("flags") or []
        return cls(verdict.get("verdict") == "correct", verdict.get("speedup_vs_eager"),
                   verdict.get("speedup_vs_compile"), verdict.get("verdict") == "harness_error",
                   "harness_retried" in flags, roofline_fraction(verdict, "candidate"),
                   roofline_fraction(verdict, "compile"), ABOVE_BOUND in flags)


def pass_rate(attempts: Sequence[Attempt]) -> float:
    """Correct attempts over all attempts (0.0 for none)."""
    return sum(a.correct for a in attempts) / len(attempts) if attempts else 0.0


def fast_p(attempts: Sequence[Attempt], p: float, baseline: str = "eager") -> float:
    """KernelBench's fast_p: attempts correct AND with ``speedup > p``, over all attempts."""
    if not attempts:
        return 0.0
    hits = 0
    for a in attempts:
        s = a.speedup(baseline)
        hits += bool(a.correct and s is not None and s > p)
    return hits / len(attempts)


def faster_rate(attempts: Sequence[Attempt], baseline: str, margin: float = PAPER_MARGIN) -> float:
    """The paper's faster rate: correct AND ``speedup > margin`` (1.05), over all attempts."""
    return fast_p(attempts, margin, baseline)


def geomean(values: Iterable[float]) -> float | None:
    """exp(mean(log v)); None for no values. Raises on a non-positive value (not a speed-up)."""
    logs = []
    for v in values:
        if not v > 0:
            raise ValueError(f"a speed-up must be positive, got {v!r}")
        logs.append(math.log(v))
    return math.exp(sum(logs) / len(logs)) if logs else None


def geomean_speedup(attempts: Sequence[Attempt], baseline: str) -> float | None:
    """The paper's speed-up: geometric mean over correct attempts that have a speed-up."""
    return geomean(s for a in attempts if a.correct and (s := a.speedup(baseline)) is not None)


def geomean_fractions(attempts: Sequence[Attempt]) -> tuple[float | None, float | None, int]:
    """(candidate's, compile's) geometric-mean fraction of the bound over the correct attempts that have
    both, and how many those are."""
    pairs = [(a.fraction, a.compile_fraction) for a in attempts
             if a.correct and a.fraction is not None and a.compile_fraction is not None]
    return geomean(p for p, _ in pairs), geomean(c for _, c in pairs), len(pairs)


@dataclass
class Summary:
    """The metrics of one split (a level, or overall). Rates are fractions in [0, 1]."""

    split: str
    attempts: int = 0
    correct: int = 0
    pass_rate: float = 0.0
    faster_than_eager: float = 0.0
    """correct and speedup_vs_eager > 1.05, over all attempts (the paper's)"""
    faster_than_compile: float = 0.0
    faster_than_eager_strict: float = 0.0
    """correct and speedup_vs_eager > 1.0, over all attempts"""
    faster_than_compile_strict: float = 0.0
    speedup_vs_eager: float | None = None
    """geometric mean over correct attempts (the paper's)"""
    speedup_vs_compile: float | None = None
    fast_p_eager: dict[float, float] = field(default_factory=dict)
    fast_p_compile: dict[float, float] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    harness_errors: int = 0
    """attempts whose final verdict is harness_error (after bench's one retry); not passed"""
    retried: int = 0
    """attempts evaluated twice because the first evaluation was a harness_error"""
    fraction_of_bound: float | None = None
    """geometric mean of the candidate's fraction of the roofline bound, over the correct attempts that
    have it and compile's"""
    compile_fraction_of_bound: float | None = None
    """compile's, over the same attempts"""
    roofline_attempts: int = 0
    above_bound: int = 0
    """attempts flagged roofline_above_bound (a fraction above 1.0: a bug)"""


def summarize(split: str, attempts: Sequence[Attempt], verdicts: Iterable[str] = ()) -> Summary:
    fraction, compile_fraction, roofline_attempts = geomean_fractions(attempts)
    return Summary(
        split=split, attempts=len(attempts), correct=sum(a.correct for a in attempts),
        pass_rate=pass_rate(attempts),
        faster_than_eager=faster_rate(attempts, "eager"), faster_than_compile=faster_rate(attempts, "compile"),
        faster_than_eager_strict=faster_rate(attempts, "eager", STRICT_MARGIN),
        faster_than_compile_strict=faster_rate(attempts, "compile", STRICT_MARGIN),
        speedup_vs_eager=geomean_speedup(attempts, "eager"), speedup_vs_compile=geomean_speedup(attempts, "compile"),
        fast_p_eager={p: fast_p(attempts, p, "eager") for p in FAST_P},
        fast_p_compile={p: fast_p(attempts, p, "compile") for p in FAST_P},
        verdicts=dict(Counter(verdicts)),
        harness_errors=sum(a.harness_error for a in attempts), retried=sum(a.retried for a in attempts),
        fraction_of_bound=fraction, compile_fraction_of_bound=compile_fraction, roofline_attempts=roofline_attempts,
        above_bound=sum(a.above_bound for a in attempts))


def split_name(level: int | None) -> str:
    return f"Level {level}" if level is not None else "Other"


NO_SOLUTION = "no_solution"


def verdict_category(verdict: dict[str, Any]) -> str:
    """The verdict as reports count it: the sandbox's verdict, or ``no_solution`` for a task that had
    nothing to evaluate (its failure record says compile_error, which reports must not count as one)."""
    if NO_SOLUTION in (verdict.get("flags") or []):
        return NO_SOLUTION
    return verdict.get("verdict", "?")


def summarize_levels(rows: Sequence[tuple[int | None, dict[str, Any]]]) -> list[Summary]:
    """``rows`` are (level, verdict dict). One Summary per level present, then ``Overall``
    over all rows pooled (weighted by task count)."""
    by_level: dict[int | None, list[dict[str, Any]]] = {}
    for level, verdict in rows:
        by_level.setdefault(level, []).append(verdict)
    order = sorted(by_level, key=lambda lv: (lv is None, lv or 0))
    out = [summarize(split_name(lv), [Attempt.from_verdict(v) for v in by_level[lv]],
                     [verdict_category(v) for v in by_level[lv]]) for lv in order]
    everything = [v for _, v in rows]
    out.append(summarize("Overall", [Attempt.from_verdict(v) for v in everything],
                         [verdict_category(v) for v in everything]))
    return out


CALIBRATION_TOLERANCE = 0.03
"""A task's own Model timed against itself should come out at 1.00x; within +-3% counts as calibrated."""


@dataclass
class CalibrationRow:
    """One task of a ``bench --calibrate`` run: its Model evaluated as the candidate."""

    task: str
    verdict: str
    speedup_vs_eager: float | None = None
    eval_s: float | None = None
    gpu_phase_share: float | None = None
    """timing.phases_s.gpu_phase / eval_s: the share of the evaluation spent in the GPU phase"""
    peak_host_rss_mb: Any = None
    peak_gpu_mb: Any = None
    host_bound: bool | None = None
    """The candidate's or eager's call was host-bound (the verdict's ``timing.host_bound``: the host's issue time
    at least its threshold share of the GPU time), so its figure measures the host's launch rate as much as the
    GPU; None when neither side's share is known."""

    @property
    def within(self) -> bool:
        s = self.speedup_vs_eager
        return s is not None and abs(s - 1.0) <= CALIBRATION_TOLERANCE + 1e-12


def calibration_row(task: str, verdict: dict[str, Any]) -> CalibrationRow:
    timing = verdict.get("timing") or {}
    eval_s = verdict.get("eval_s")
    gpu_s = (timing.get("phases_s") or {}).get("gpu_phase")
    share = gpu_s / eval_s if gpu_s is not None and eval_s else None
    return CalibrationRow(task, verdict.get("verdict", "?"), verdict.get("speedup_vs_eager"), eval_s, share,
                          timing.get("peak_host_rss_mb"), timing.get("peak_gpu_mb"), host_bound(timing))


def host_bound(timing: dict) -> bool | None:
    """Whether a verdict's candidate or eager call was host-bound, from ``timing.host_bound``
    ({"candidate": share, "eager": share, "threshold": t}); None when no share is known."""
    parsed = host_bound_shares(timing.get("host_bound") if isinstance(timing, dict) else None)
    if parsed is None or not parsed[0]:
        return None
    shares, t = parsed
    return any(x >= t for x in shares.values())


def union_s(intervals: Iterable[Sequence[float]]) -> float:
    """Seconds covered by the union of (start, end) intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


@dataclass
class GpuBusy:
    share: float | None
    lock_s: float
    running_s: float
    gpus: int


def gpu_busy(results: Iterable[Any]) -> GpuBusy:
    """The GPU-busy share of a run's results (bench Result rows: ``lane``, ``started``, ``finished``,
    ``verdict``), as defined in this module's doc; None when no attempt held a GPU."""
    lock: dict[str, list] = {}
    running: dict[str, list] = {}
    for r in results:
        if not (r.lane or "").startswith("gpu") or r.started is None or r.finished is None:
            continue
        gpu = r.lane.split(".")[0]
        running.setdefault(gpu, []).append((r.started, r.finished))
        lock.setdefault(gpu, []).extend((r.verdict.get("timing") or {}).get("gpu_lock_intervals") or [])
    lock_s = sum(union_s(iv) for iv in lock.values())
    running_s = sum(union_s(iv) for iv in running.values())
    share = lock_s / running_s if running_s > 0 and lock_s > 0 else None
    return GpuBusy(share, round(lock_s, 1), round(running_s, 1), len(running))


@dataclass
class QuietWaits:
    timed: int
    """Attempts that timed their baselines (a cache miss)."""
    waited_s: float
    """Seconds they waited, in all, for other evaluations' candidate code on their GPU to end (GpuLock.quiet)."""
    max_s: float
    not_quiet: int
    """Attempts that gave up waiting (quiet_wait_s): their baselines were timed beside it and not cached."""


def quiet_waits(results: Iterable[Any]) -> QuietWaits:
    """What timing the baselines quiet cost a run (verdicts' ``timing.quiet``)."""
    waits = [q for q in ((r.verdict.get("timing") or {}).get("quiet") for r in results) if isinstance(q, dict)]
    seconds = [float(q.get("waited_s") or 0.0) for q in waits]
    return QuietWaits(len(waits), round(sum(seconds), 1), round(max(seconds, default=0.0), 1),
                      sum(q.get("quiet") is False for q in waits))


def calibrated_share(rows: Sequence[CalibrationRow]) -> float:
    """Tasks whose speed-up vs eager lies within 1.00 +- 0.03, over all tasks (a failed one is not)."""
    return sum(r.within for r in rows) / len(rows) if rows else 0.0


DEFINITIONS = """\
- One attempt is one (task, sample) result; with one sample per task, an attempt is a task.
- **Pass Rate**: correct attempts / all attempts. No solution, compile error, crash, timeout, wrong output
  and rejected (a cheat caught by the honesty checks) all count as not passed. Verdict counts show
  `no_solution` (nothing to evaluate for the task) apart from `compile_error`.
- **Rules**: `cuda-agent` (the paper's: forward runs only the solution's own kernels) or `kernelbench`
  (torch ops and layers may run in forward beside at least one of the solution's own kernels).
- **Faster Rate vs. Eager / Compile** (the paper's): attempts that are correct AND more than 5% faster than
  PyTorch eager / torch.compile (speed-up > 1.05), over all attempts. *Strict* columns use speed-up > 1.0.
- **Speed-up vs. Eager / Compile** (the paper's): geometric mean of `baseline_ms / kernel_ms` over the
  correct attempts only; failed attempts are left out. Against compile, correct attempts whose compile
  baseline failed are left out as well.
- **Fraction of the bound** (roofline): the least time the GPU allows for the task (its inputs, parameters
  and outputs moved once at the measured HBM bandwidth, or its FLOPs, counted by torch's FlopCounterMode,
  at the datasheet's peak for the precision in force, whichever is larger) over the time taken; 100% is
  the hardware's limit. Table 1's note gives its geometric mean for the candidate and for compile over the
  same correct attempts. A fraction above 100% is a bug, flagged `roofline_above_bound` and counted.
- **fast_p** (KernelBench's): attempts that are correct AND have speed-up > p, over all attempts.
- **Overall**: every level's attempts pooled, i.e. the level figures weighted by their task counts.
- **Harness errors**: attempts whose verdict is `harness_error` (the reference crashed, a worker was killed
  from outside, the harness raised), after bench evaluated each once more; counted apart and as not passed.
  *Retried*: attempts evaluated twice because the first evaluation was a harness error.
- **GPU-busy share**: per GPU, the time some evaluation held the sandbox's GPU lock (concurrent holds counted
  once) over the time some evaluation was running on it (gaps between the calls of a resumed run left out).
- Times are medians of CUDA-event timings with the L2 cache flushed between calls, inputs refreshed per
  call, baselines in the precision mode shown (`fp32`: strict FP32, no TF32)."""
