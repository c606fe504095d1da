"""Reports of bench runs: the paper's Table 1 in markdown, a self-contained HTML page, a per-task table.

    write_report([run, *others], out_dir) -> {"markdown": ..., "html": ..., "tasks": ...}

``report.md``  Table 1 (Pass Rate, Faster Rate vs. Eager / Compile, Speed-up vs. Eager / Compile per
               level and overall), strict rates, fast_p, verdict counts, the environment, definitions.
``report.html`` the same, plus plots (base64 PNG, matplotlib Agg; left out with a note when
               matplotlib is missing): speed-up distribution per level, per-task speed-ups sorted,
               verdicts per level, and with several runs a comparison; then the per-task table.
``tasks.md``   one line per attempt: verdict, reward, times, speed-ups, the roofline bound and the fraction
               of it the candidate, eager and compile reach, flags, first reason.
``roofline.png`` fraction of the roofline bound per level for candidate, eager and compile (when the
               verdicts have the block and matplotlib is installed); also in the HTML page.
``summary.json`` every run's summaries (the metrics above, harness errors included) and, for a
               ``bench --calibrate`` run, its calibration rows.

Harness errors (``harness_error``: not the candidate's failure; bench retries each once) are counted
apart in every one of them. A calibration run (``bench --calibrate``) adds a section: each task's
speed-up vs eager of its own Model (1.00x is right), the share within 1.00 +- 0.03, eval wall time,
the GPU phase's share of it, and peak memory when the verdicts record it.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import io
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .metrics import (BASELINES, CALIBRATION_TOLERANCE, DEFINITIONS, FAST_P, NO_SOLUTION, ROOFLINE_KEYS,
                      CalibrationRow, Summary, calibrated_share, calibration_row, gpu_busy, quiet_waits,
                      roofline_fraction, split_name, summarize_levels, verdict_category)
from .store import Result, load_run

VERDICT_ORDER = ("correct", "incorrect", "rejected", "compile_error", "runtime_error", "timeout", "harness_error",
                 NO_SOLUTION)
VERDICT_COLORS = {"correct": "#2e7d32", "incorrect": "#c62828", "rejected": "#6a1b9a", "compile_error": "#ef6c00",
                  "runtime_error": "#ad1457", "timeout": "#5d4037", "harness_error": "#607d8b", NO_SOLUTION: "#9e9e9e"}
RUN_COLORS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828", "#00838f")
TABLE1_COLUMNS = ("Split", "Tasks", "Pass Rate", "Faster Rate vs. Eager", "Faster Rate vs. Compile",
                  "Speed-up vs. Eager", "Speed-up vs. Compile")


@dataclass
class RunData:
    name: str
    path: Path
    config: dict
    results: list[Result]
    summaries: list[Summary]

    def values(self, key: str) -> list[str]:
        """Distinct non-empty values of a verdict field over the run (gpu, torch_version)."""
        return sorted({str(r.verdict.get(key)) for r in self.results if r.verdict.get(key)})

    @property
    def precisions(self) -> list[str]:
        modes = {(r.verdict.get("precision") or {}).get("mode") for r in self.results}
        modes |= {self.config.get("precision")}
        return sorted(m for m in modes if m)

    @property
    def rule_sets(self) -> list[str]:
        """The rule sets its verdicts were judged under (runs before --rules: cuda-agent)."""
        sets = {r.verdict.get("rules") for r in self.results} | {self.config.get("rules", "cuda-agent")}
        return sorted(s for s in sets if s)

    @property
    def gpus(self) -> list[str]:
        from_runs = {g for inv in self.config.get("invocations", []) for g in inv.get("gpus", [])}
        return sorted(set(self.values("gpu")) | from_runs)

    @property
    def torch_versions(self) -> list[str]:
        return self.values("torch_version") or ([self.config["torch"]] if self.config.get("torch") else [])

    @property
    def calibration(self) -> list[CalibrationRow]:
        """Per-task calibration rows of a ``bench --calibrate`` run; empty for other runs."""
        if self.config.get("mode") != "calibrate":
            return []
        return [calibration_row(r.task if r.sample == 0 else f"{r.task}/{r.sample}", r.verdict) for r in self.results]


def load(path: str | Path, name: str | None = None) -> RunData:
    config, results = load_run(path)
    summaries = summarize_levels([(r.level, r.verdict) for r in results])
    return RunData(name or Path(path).resolve().name, Path(path).resolve(), config, results, summaries)


# ----------------------------------------------------------------------------- formatting

def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def speed(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def num(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def table1_rows(s: Summary) -> list[str]:
    return [s.split, str(s.attempts), pct(s.pass_rate), pct(s.faster_than_eager), pct(s.faster_than_compile),
            speed(s.speedup_vs_eager), speed(s.speedup_vs_compile)]


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(out)


def table1_markdown(runs: list[RunData]) -> str:
    """The paper's Table 1 columns, one row per level and overall (a Run column when comparing)."""
    multi = len(runs) > 1
    header = (["Run"] if multi else []) + list(TABLE1_COLUMNS)
    rows = [([run.name] if multi else []) + table1_rows(s) for run in runs for s in run.summaries]
    return _md_table(header, rows)


def strict_markdown(runs: list[RunData]) -> str:
    multi = len(runs) > 1
    header = (["Run"] if multi else []) + ["Split", "Correct", "Faster vs. Eager (> 1.0)", "Faster vs. Compile (> 1.0)"]
    rows = [([run.name] if multi else []) + [s.split, f"{s.correct}/{s.attempts}", pct(s.faster_than_eager_strict),
                                             pct(s.faster_than_compile_strict)] for run in runs for s in run.summaries]
    return _md_table(header, rows)


def fast_p_markdown(runs: list[RunData]) -> str:
    multi = len(runs) > 1
    header = (["Run"] if multi else []) + ["Split", "Baseline"] + [f"fast_{p:g}" for p in FAST_P]
    rows = []
    for run in runs:
        for s in run.summaries:
            for base, values in (("eager", s.fast_p_eager), ("compile", s.fast_p_compile)):
                rows.append(([run.name] if multi else []) + [s.split, base] + [pct(values[p]) for p in FAST_P])
    return _md_table(header, rows)


def verdicts_markdown(runs: list[RunData]) -> str:
    multi = len(runs) > 1
    header = (["Run"] if multi else []) + ["Split"] + list(VERDICT_ORDER)
    rows = [([run.name] if multi else []) + [s.split] + [str(s.verdicts.get(v, 0)) for v in VERDICT_ORDER]
            for run in runs for s in run.summaries]
    return _md_table(header, rows)


def harness_markdown(runs: list[RunData]) -> str:
    multi = len(runs) > 1
    header = (["Run"] if multi else []) + ["Split", "Attempts", "Harness errors", "Retried"]
    rows = [([run.name] if multi else []) + [s.split, str(s.attempts), str(s.harness_errors), str(s.retried)]
            for run in runs for s in run.summaries]
    return _md_table(header, rows)


HARNESS_NOTE = ("A harness error (`harness_error`) is not the candidate's failure: the reference crashed, a worker was "
                "killed from outside or the harness raised. Bench evaluates such an attempt once more (the first "
                "verdict is kept in `verdict.first.json`); one that stays a harness error counts as not passed.")


def _mem(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, dict):
        return ", ".join(f"{k} {_mem(v)}" for k, v in x.items())
    return f"{x:.0f}" if isinstance(x, (int, float)) else str(x)


def calibration_cells(row: CalibrationRow) -> list[str]:
    return [row.task, row.verdict, speed(row.speedup_vs_eager), "yes" if row.within else "no",
            num(row.eval_s, ".2f"), "-" if row.gpu_phase_share is None else pct(row.gpu_phase_share),
            _mem(row.peak_host_rss_mb), _mem(row.peak_gpu_mb), {True: "yes", False: "no"}.get(row.host_bound, "-")]


CALIBRATION_HEADER = ["Task", "Verdict", "Speed-up vs. Eager", f"Within 1.00 ± {CALIBRATION_TOLERANCE:.2f}",
                      "Eval s", "GPU phase share", "Peak host RSS MB", "Peak GPU MB", "Host-bound"]


def calibration_summary(run: RunData) -> str:
    rows = run.calibration
    within = sum(r.within for r in rows)
    out = (f"{within}/{len(rows)} tasks ({pct(calibrated_share(rows))}) have their own Model within "
           f"1.00 ± {CALIBRATION_TOLERANCE:.2f} of eager")
    missed = [r for r in rows if not r.within]
    bound = [r for r in missed if r.host_bound]
    if bound:  # a cause measured in the verdict, not a guess: named apart
        out += (f"; {len(bound)} of the {len(missed)} outside it host-bound (the GPU waited for the host to "
                f"launch the call's kernels, so the figure follows the host's speed): "
                + ", ".join(r.task for r in bound[:12]) + (", …" if len(bound) > 12 else ""))
    return out


def calibration_markdown(run: RunData) -> str:
    return (f"{calibration_summary(run)}.\n\n"
            + _md_table(CALIBRATION_HEADER, [calibration_cells(r) for r in run.calibration]))


def summary_json(runs: list[RunData]) -> dict:
    """Every run's metrics (harness errors included) and calibration rows, for machines."""
    out = []
    for run in runs:
        entry = {"name": run.name, "path": str(run.path), "mode": run.config.get("mode"),
                 "summaries": [dataclasses.asdict(s) for s in run.summaries]}
        busy = gpu_busy(run.results)
        if busy.share is not None:
            entry["gpu_busy"] = dataclasses.asdict(busy)
        if run.calibration:
            entry["calibration"] = {"tolerance": CALIBRATION_TOLERANCE, "within_share": calibrated_share(run.calibration),
                                    "tasks": [{**dataclasses.asdict(r), "within": r.within} for r in run.calibration]}
        out.append(entry)
    return {"runs": out}


def environment_lines(run: RunData) -> list[str]:
    started = [inv.get("started") for inv in run.config.get("invocations", [])]
    return [(f"- run `{run.name}`: `{run.path}`, mode {run.config.get('mode', '?')}, "
            f"{len(run.results)} attempts, started {started[0] if started else '?'}"),
            f"- GPU: {', '.join(run.gpus) or 'none recorded (no attempt reached the GPU)'}",
            f"- torch: {', '.join(run.torch_versions) or '?'}   precision mode: {', '.join(run.precisions) or '?'}"
            f"   rules: {', '.join(run.rule_sets)}", *busy_lines(run)]


def busy_lines(run: RunData) -> list[str]:
    b = gpu_busy(run.results)
    if b.share is None:
        return []
    lines = [f"- GPU-busy share: {pct(b.share)} (the GPU lock held {b.lock_s:.0f} s of the {b.running_s:.0f} s in "
             f"which evaluations ran, {b.gpus} GPU{'s' if b.gpus > 1 else ''})"]
    q = quiet_waits(run.results)
    if q.timed:
        lines.append(f"- baselines timed quiet: {q.timed} attempts timed them, waiting {q.waited_s:.0f} s in all "
                     f"(at most {q.max_s:.0f} s) for other evaluations' candidate code on their GPU to end"
                     + (f"; {q.not_quiet} gave up waiting (timed beside it, not cached)" if q.not_quiet else ""))
    return lines


def first_reason(r: Result) -> str:
    reasons = r.verdict.get("reasons") or []
    text = reasons[0] if reasons else ""
    if r.verdict.get("verdict") == "compile_error":  # "build failed" alone tells a reader nothing
        errors = [ln.strip() for ln in (r.verdict.get("log") or "").splitlines() if "error" in ln.lower()]
        if errors and errors[0] not in text:
            text = f"{text}: {errors[0]}" if text else errors[0]
    text = " ".join(text.split())
    return text[:160] + ("..." if len(text) > 160 else "")


ROOFLINE_HEADER = ["Bound", "Of bound", "Eager of bound", "Compile of bound"]


def bound_cell(verdict: dict) -> str:
    """'memory 0.42 ms': which limit bounds the task, and the least time it allows."""
    block = verdict.get("roofline") or {}
    return "-" if block.get("bound_ms") is None else f"{block['bound']} {block['bound_ms']:.4g} ms"


def fraction_cell(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%" + (" (above 1: a bug)" if x > 1.0 else "")


def roofline_cells(verdict: dict) -> list[str]:
    return [bound_cell(verdict), *(fraction_cell(roofline_fraction(verdict, who)) for who in ROOFLINE_KEYS)]


def tasks_markdown(run: RunData) -> str:
    header = ["Task", "Sample", "Title", "Status", "Verdict", "Reward", "ms", "Eager ms", "Compile ms",
              "vs. Eager", "vs. Compile", *ROOFLINE_HEADER, "Flags", "Reason"]
    rows = []
    for r in run.results:
        v = r.verdict
        rows.append([r.task, str(r.sample), r.title or "", r.status, verdict_category(v), num(v.get("reward"), "g"),
                     num(v.get("ms")), num(v.get("eager_ms")), num(v.get("compile_ms")),
                     speed(v.get("speedup_vs_eager")), speed(v.get("speedup_vs_compile")), *roofline_cells(v),
                     ", ".join(v.get("flags") or []), first_reason(r)])
    return f"# Per-task results: {run.name}\n\n" + _md_table(header, rows) + "\n"


def roofline_note(runs: list[RunData]) -> list[str]:
    """Table 1's note on the roofline: per split, the geometric mean of the candidate's fraction of the
    bound next to compile's, over the same correct attempts; and any attempt above the bound, said."""
    lines = []
    for run in runs:
        for s in run.summaries:
            if s.roofline_attempts:
                lines.append(f"{run.name + ': ' if len(runs) > 1 else ''}{s.split}: the candidate reaches "
                             f"{pct(s.fraction_of_bound)} of the roofline bound, compile "
                             f"{pct(s.compile_fraction_of_bound)} (geometric means over {s.roofline_attempts} correct "
                             "attempts)")
            if s.above_bound and s.split != "Overall":
                lines.append(f"{run.name + ': ' if len(runs) > 1 else ''}{s.split}: {s.above_bound} attempt(s) report "
                             "a fraction above 100% of the bound (flagged `roofline_above_bound`): a bug in the "
                             "bound or the timing, see tasks.md")
    return [f"- {ln}" for ln in lines]


HEADROOM_TOP = 10


def headroom_rows(run: RunData, n: int = HEADROOM_TOP) -> list[list[str]]:
    """The ``n`` tasks where torch.compile is farthest from the hardware's limit: the best targets."""
    seen, rows = set(), []
    for r in run.results:
        f = roofline_fraction(r.verdict, "compile")
        if f is not None and r.task not in seen:
            seen.add(r.task)
            rows.append((f, r))
    rows.sort(key=lambda fr: fr[0])
    return [[r.task, r.title or "", bound_cell(r.verdict), num(r.verdict.get("compile_ms")), fraction_cell(f),
             fraction_cell(roofline_fraction(r.verdict, "candidate"))] for f, r in rows[:n]]


HEADROOM_HEADER = ["Task", "Title", "Bound", "Compile ms", "Compile of bound", "Candidate of bound"]


def _quantile(sorted_vals: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = q * (len(sorted_vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


DISTRIBUTION_HEADER = ["Split", "Who", "Tasks", "p10", "Median", "p90", "Max"]


def roofline_distribution_rows(run: RunData) -> list[list[str]]:
    """Per level, the distribution of each one's fraction of the bound (every attempt that has it: the
    candidate's on correct attempts, eager's and compile's wherever the baselines ran)."""
    rows = []
    for lv in _levels([run]):
        for who in ROOFLINE_KEYS:
            vals = sorted(_fractions(run, who, lv))
            if vals:
                rows.append([split_name(lv), who, str(len(vals)),
                             *(fraction_cell(_quantile(vals, q)) for q in (0.1, 0.5, 0.9)), fraction_cell(vals[-1])])
    return rows


def headroom_markdown(runs: list[RunData]) -> list[str]:
    parts = []
    for run in runs:
        dist = roofline_distribution_rows(run)
        if dist:
            parts += [f"## Fraction of the roofline bound per level{': ' + run.name if len(runs) > 1 else ''}", "",
                      _md_table(DISTRIBUTION_HEADER, dist), ""]
        rows = headroom_rows(run)
        if rows:
            parts += [f"## Most headroom under torch.compile{': ' + run.name if len(runs) > 1 else ''}", "",
                      (f"The {len(rows)} tasks where compile reaches the smallest fraction of the roofline bound: "
                       "the most left to gain."), "", _md_table(HEADROOM_HEADER, rows), ""]
    return parts


def report_markdown(runs: list[RunData]) -> str:
    title = "Bench report: " + " vs. ".join(r.name for r in runs)
    note = roofline_note(runs)
    parts = [f"# {title}", "", *[ln for run in runs for ln in environment_lines(run)], "",
             "## Table 1", "", table1_markdown(runs), "",
             ("Faster rates count attempts more than 5% faster than the baseline (speed-up > 1.05), over all attempts; "
             "speed-ups are geometric means over correct attempts only."), "",
             *([*note, ""] if note else []),
             "## Strict faster rates", "", strict_markdown(runs), "",
             "## fast_p (KernelBench)", "", fast_p_markdown(runs), "",
             "## Verdicts", "", verdicts_markdown(runs), "",
             "## Harness errors", "", harness_markdown(runs), "", HARNESS_NOTE, "", *headroom_markdown(runs)]
    for run in runs:
        if run.calibration:
            parts += [f"## Calibration: {run.name}", "", calibration_markdown(run), ""]
    parts += ["## Definitions", "", DEFINITIONS, ""]
    return "\n".join(parts)


# ----------------------------------------------------------------------------- plots

def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _speedups(run: RunData, base: str, level=None) -> list[float]:
    out = []
    for r in run.results:
        s = r.verdict.get(f"speedup_vs_{base}")
        if r.verdict.get("verdict") == "correct" and s and (level is None or r.level == level):
            out.append(s)
    return out


def _levels(runs: list[RunData]) -> list:
    return sorted({r.level for run in runs for r in run.results}, key=lambda lv: (lv is None, lv or 0))


def _reference_lines(ax) -> None:
    ax.axhline(1.0, color="#444", lw=1, ls="-", zorder=0)
    ax.axhline(1.05, color="#888", lw=1, ls="--", zorder=0)


def _speedup_axis(ax, values: list[float], which: str = "y") -> None:
    """Log scale with ticks at powers of two labelled as speed-ups (0.5x, 1x, 2x), 1x always shown."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    axis = ax.yaxis if which == "y" else ax.xaxis
    (ax.set_yscale if which == "y" else ax.set_xscale)("log")
    lo, hi = min(values + [0.8]), max(values + [1.25])
    ticks = [2.0 ** k for k in range(-10, 11) if lo / 2 <= 2.0 ** k <= hi * 2]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    (ax.set_ylim if which == "y" else ax.set_xlim)(lo / 1.3, hi * 1.3)


def plot_distribution(plt, runs: list[RunData]) -> str:
    levels = _levels(runs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    width = 0.8 / len(runs)
    for ax, base in zip(axes, ("eager", "compile")):
        for k, run in enumerate(runs):
            for i, lv in enumerate(levels):
                vals = _speedups(run, base, lv)
                x = i + (k - (len(runs) - 1) / 2) * width
                if vals:
                    ax.boxplot([vals], positions=[x], widths=width * 0.8, showfliers=False,
                               patch_artist=True, boxprops={"facecolor": RUN_COLORS[k % 6] + "33",
                                                            "edgecolor": RUN_COLORS[k % 6]},
                               medianprops={"color": RUN_COLORS[k % 6]})
                    jitter = [x + width * 0.25 * math.sin(7.3 * j) for j in range(len(vals))]
                    ax.scatter(jitter, vals, s=12, color=RUN_COLORS[k % 6], alpha=0.7, zorder=3,
                               label=run.name if i == 0 else None)
        _reference_lines(ax)
        _speedup_axis(ax, [v for run in runs for v in _speedups(run, "eager") + _speedups(run, "compile")])
        ax.set_xticks(range(len(levels)), [split_name(lv) for lv in levels])
        ax.set_xlim(-0.6, len(levels) - 0.4)
        ax.set_title(f"speed-up vs. {base} (correct attempts)")
        ax.grid(axis="y", alpha=0.25)
    axes[0].set_ylabel("speed-up (log scale)")
    if len(runs) > 1:
        axes[1].legend(loc="best", fontsize=8)
    fig.tight_layout()
    out = _png(fig)
    plt.close(fig)
    return out


def _sorted_speedups(run: RunData, base: str) -> list[tuple[float, str]]:
    out = []
    for r in run.results:
        s = r.verdict.get(f"speedup_vs_{base}")
        if r.verdict.get("verdict") == "correct" and s:
            out.append((s, r.task if r.sample == 0 else f"{r.task}/{r.sample}"))
    return sorted(out)


def plot_sorted(plt, runs: list[RunData]) -> str:
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9), sharey=True)
    everything = [v for run in runs for b in BASELINES for v, _ in _sorted_speedups(run, b)]
    for ax, base in zip(axes, BASELINES):
        for k, run in enumerate(runs):
            pairs = _sorted_speedups(run, base)
            if not pairs:
                continue
            vals, names = [v for v, _ in pairs], [n for _, n in pairs]
            xs = list(range(1, len(vals) + 1))
            if len(runs) == 1:
                colors = [RUN_COLORS[0] if v > 1.05 else "#9e9e9e" for v in vals]
                ax.bar(xs, [v - 1 for v in vals], bottom=1, color=colors, width=0.75)
                if len(vals) <= 60:
                    ax.set_xticks(xs, names, rotation=90, fontsize=7)
            else:
                ax.plot(xs, vals, marker="o", ms=3, lw=1.2, color=RUN_COLORS[k % 6], label=f"{run.name} ({len(vals)})")
        _reference_lines(ax)
        if everything:
            _speedup_axis(ax, everything)
        if len(runs) > 1 or len(_sorted_speedups(runs[0], base)) > 60:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("correct attempts, sorted by speed-up")
        ax.set_title(f"per-task speed-up vs. {base} (correct attempts, sorted)")
        ax.grid(axis="y", alpha=0.25)
        if len(runs) > 1:
            ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("speed-up (log scale)")
    fig.tight_layout()
    out = _png(fig)
    plt.close(fig)
    return out


def _fractions(run: RunData, who: str, level) -> list[float]:
    return [f for r in run.results if r.level == level and (f := roofline_fraction(r.verdict, who)) is not None]


def has_roofline(runs: list[RunData]) -> bool:
    return any(roofline_fraction(r.verdict, who) is not None
               for run in runs for r in run.results for who in ROOFLINE_KEYS)


def plot_roofline(plt, runs: list[RunData]) -> str:
    """Fraction of the roofline bound per level: each run's candidate, and eager and compile (the first
    run's: baselines do not depend on the policy). A line at 100%, the hardware's limit."""
    levels = _levels(runs)
    series = [(f"{run.name}" if len(runs) > 1 else "candidate", run, "candidate", RUN_COLORS[k % 6])
              for k, run in enumerate(runs)]
    series += [("eager", runs[0], "eager", "#9e9e9e"), ("compile", runs[0], "compile", "#455a64")]
    fig, ax = plt.subplots(figsize=(11, 3.8))
    width = 0.8 / len(series)
    top = 1.05
    for k, (label, run, who, color) in enumerate(series):
        legend = label  # on the series' first box, whichever level that is
        for i, lv in enumerate(levels):
            vals = _fractions(run, who, lv)
            if not vals:
                continue
            top = max(top, max(vals) * 1.05)
            x = i + (k - (len(series) - 1) / 2) * width
            ax.boxplot([vals], positions=[x], widths=width * 0.8, showfliers=False, patch_artist=True,
                       boxprops={"facecolor": color + "33", "edgecolor": color}, medianprops={"color": color})
            jitter = [x + width * 0.25 * math.sin(7.3 * j) for j in range(len(vals))]
            ax.scatter(jitter, vals, s=10, color=color, alpha=0.7, zorder=3, label=legend)
            legend = None
    ax.axhline(1.0, color="#c62828", lw=1, ls="--", zorder=0)
    ax.set_xticks(range(len(levels)), [split_name(lv) for lv in levels])
    ax.set_xlim(-0.6, len(levels) - 0.4)
    ax.set_ylim(0, top)
    ax.yaxis.set_major_formatter(lambda v, _: f"{100 * v:.0f}%")
    ax.set_ylabel("fraction of the roofline bound")
    ax.set_title("fraction of the hardware's limit reached, per level (dashed: 100%)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.25)
    fig.tight_layout()
    out = _png(fig)
    plt.close(fig)
    return out


def plot_verdicts(plt, runs: list[RunData]) -> str:
    labels, counts = [], []
    for run in runs:
        for s in run.summaries:
            labels.append(f"{run.name}: {s.split}" if len(runs) > 1 else s.split)
            counts.append(s.verdicts)
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(labels) + 1.0))
    y = list(range(len(labels)))[::-1]
    left = [0] * len(labels)
    for v in VERDICT_ORDER:
        widths = [c.get(v, 0) for c in counts]
        if any(widths):
            ax.barh(y, widths, left=left, color=VERDICT_COLORS[v], label=v, height=0.6)
            left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(y, labels)
    ax.set_xlabel("attempts")
    ax.set_title("verdicts per split")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    out = _png(fig)
    plt.close(fig)
    return out


def plot_comparison(plt, runs: list[RunData]) -> str:
    splits = [s.split for s in runs[0].summaries]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / len(runs)
    metrics = (("pass_rate", "pass rate"), ("faster_than_compile", "faster rate vs. compile (> 1.05)"))
    for ax, (attr, title) in zip(axes, metrics):
        for k, run in enumerate(runs):
            by = {s.split: s for s in run.summaries}
            vals = [100 * getattr(by[sp], attr) if sp in by else 0 for sp in splits]
            xs = [i + (k - (len(runs) - 1) / 2) * width for i in range(len(splits))]
            bars = ax.bar(xs, vals, width=width * 0.9, color=RUN_COLORS[k % 6], label=run.name)
            ax.bar_label(bars, fmt="%.0f%%", fontsize=7, padding=1)
        ax.set_xticks(range(len(splits)), splits)
        ax.set_ylim(0, 110)
        ax.set_ylabel("% of attempts")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.25)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    out = _png(fig)
    plt.close(fig)
    return out


def plot_pairs(plt, a: RunData, b: RunData) -> str | None:
    sa = {r.key: r.verdict.get("speedup_vs_compile") for r in a.results if r.verdict.get("verdict") == "correct"}
    sb = {r.key: r.verdict.get("speedup_vs_compile") for r in b.results if r.verdict.get("verdict") == "correct"}
    keys = [k for k in sa if k in sb and sa[k] and sb[k]]
    if not keys:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 5.2))
    xs, ys = [sa[k] for k in keys], [sb[k] for k in keys]
    ax.scatter(xs, ys, s=18, color=RUN_COLORS[0], alpha=0.8, zorder=3)
    if len(keys) <= 30:
        for k, x, y in zip(keys, xs, ys):
            ax.annotate(k[0], (x, y), xytext=(3, 3), textcoords="offset points", fontsize=7, color="#444")
    lo, hi = min(xs + ys + [0.8]), max(xs + ys + [1.25])
    ax.plot([lo / 1.3, hi * 1.3], [lo / 1.3, hi * 1.3], color="#666", lw=1, ls="--")
    _speedup_axis(ax, xs + ys, "x")
    _speedup_axis(ax, xs + ys, "y")
    ax.set_xlabel(f"{a.name}: speed-up vs. compile")
    ax.set_ylabel(f"{b.name}: speed-up vs. compile")
    ax.set_title(f"tasks correct in both ({len(keys)})")
    ax.grid(which="both", alpha=0.25)
    fig.tight_layout()
    out = _png(fig)
    plt.close(fig)
    return out


# ----------------------------------------------------------------------------- HTML

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1320px;color:#222;
  padding:0 16px;line-height:1.45}
h1{font-size:24px;margin:0 0 6px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;font-size:13px;margin:2px 0}
table{border-collapse:collapse;font-size:13px;margin:6px 0 10px}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;vertical-align:top}
th{background:#f3f5f8;font-weight:600}
td.l,th.l{text-align:left}
tr.overall td{font-weight:600;background:#fafafa}
.verdict{font-weight:600}
.flags{color:#6a1b9a;font-size:12px}
.reason{color:#555;font-size:12px;text-align:left;max-width:420px}
.note{color:#666;font-size:13px}
.defs{font-size:13px;color:#333;background:#f8f9fb;border:1px solid #e3e6ea;padding:8px 16px}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
.scroll{overflow-x:auto}
a{color:#1565c0;text-decoration:none}
"""


def _html_table(header: list[str], rows: list[list[str]], left: int | set[int] = 1,
                row_classes: list[str] | None = None) -> str:
    """Cells are HTML already. Columns in ``left`` (or the first ``left``) are left-aligned: text."""
    left = set(range(left)) if isinstance(left, int) else left
    th = "".join(f'<th class="{"l" if i in left else ""}">{h}</th>' for i, h in enumerate(header))
    body = []
    for n, row in enumerate(rows):
        cls = f' class="{row_classes[n]}"' if row_classes and row_classes[n] else ""
        tds = "".join(f'<td class="{"l" if i in left else ""}">{c}</td>' for i, c in enumerate(row))
        body.append(f"<tr{cls}>{tds}</tr>")
    return f'<div class="scroll"><table><tr>{th}</tr>{"".join(body)}</table></div>'


def _summary_tables_html(runs: list[RunData]) -> tuple[str, str]:
    """(Table 1, the other summary tables) as HTML."""
    multi = len(runs) > 1
    esc = html.escape
    pre = ["Run"] if multi else []

    def rows(fn):
        out, classes = [], []
        for run in runs:
            for s in run.summaries:
                out.append(([esc(run.name)] if multi else []) + [esc(c) for c in fn(s)])
                classes.append("overall" if s.split == "Overall" else "")
        return out, classes

    t1, c1 = rows(table1_rows)
    st, c2 = rows(lambda s: [s.split, f"{s.correct}/{s.attempts}", pct(s.faster_than_eager_strict),
                             pct(s.faster_than_compile_strict)])
    fe, c3 = rows(lambda s: [s.split] + [pct(s.fast_p_eager[p]) for p in FAST_P])
    fc, c4 = rows(lambda s: [s.split] + [pct(s.fast_p_compile[p]) for p in FAST_P])
    vd, c5 = rows(lambda s: [s.split] + [str(s.verdicts.get(v, 0)) for v in VERDICT_ORDER])
    he, c6 = rows(lambda s: [s.split, str(s.attempts), str(s.harness_errors), str(s.retried)])
    left = len(pre) + 1
    table1 = "".join([
        "<h2>Table 1</h2>", _html_table(pre + list(TABLE1_COLUMNS), t1, left, c1),
        ('<p class="note">Faster rates: correct and more than 5% faster than the baseline (speed-up &gt; 1.05), over '
        "all attempts. Speed-ups: geometric mean over correct attempts only. Definitions below.</p>")])
    details = "".join([
        "<h2>Strict faster rates and fast_p</h2>",
        _html_table(pre + ["Split", "Correct", "Faster vs. Eager (&gt; 1.0)", "Faster vs. Compile (&gt; 1.0)"], st,
                    left, c2),
        _html_table(pre + ["Split"] + [f"fast_{p:g} vs. eager" for p in FAST_P], fe, left, c3),
        _html_table(pre + ["Split"] + [f"fast_{p:g} vs. compile" for p in FAST_P], fc, left, c4),
        "<h2>Verdict counts</h2>", _html_table(pre + ["Split"] + list(VERDICT_ORDER), vd, left, c5),
        "<h2>Harness errors</h2>", _html_table(pre + ["Split", "Attempts", "Harness errors", "Retried"], he, left, c6),
        f'<div class="note">{_md_to_html("- " + HARNESS_NOTE)}</div>',
    ])
    for run in runs:
        if run.calibration:
            details += (f"<h2>Calibration: {esc(run.name)}</h2><p class=\"note\">{esc(calibration_summary(run))}.</p>"
                        + _html_table(CALIBRATION_HEADER,
                                      [[esc(c) for c in calibration_cells(r)] for r in run.calibration], {0, 1}))
    return table1, details


def _tasks_html(run: RunData, out_dir: Path, compare: list[RunData]) -> str:
    esc = html.escape
    header = ["Task", "Sample", "Title", "Verdict", "Reward", "ms", "Eager ms", "Compile ms", "vs. Eager", "vs. Compile"]
    header += [f"{esc(o.name)}: vs. Compile" for o in compare] + ROOFLINE_HEADER + ["Flags", "Reason"]
    others = [{r.key: r for r in o.results} for o in compare]
    rows = []
    for r in run.results:
        v = r.verdict
        verdict = verdict_category(v)
        link = run.path / "tasks" / r.task / f"sample_{r.sample}" / "verdict.json"
        rel = os.path.relpath(link, out_dir)
        cell = (f'<a href="{esc(rel)}"><span class="verdict" style="color:{VERDICT_COLORS.get(verdict, "#222")}">'
                f"{esc(verdict)}</span></a>" + ("" if r.status == "evaluated" else f" <small>({esc(r.status)})</small>"))
        row = [esc(r.task), str(r.sample), esc((r.title or "")[:48]), cell, num(v.get("reward"), "g"),
               num(v.get("ms")), num(v.get("eager_ms")), num(v.get("compile_ms")),
               speed(v.get("speedup_vs_eager")), speed(v.get("speedup_vs_compile"))]
        for o in others:
            other = o.get(r.key)
            row.append("-" if other is None else
                       (speed(other.verdict.get("speedup_vs_compile")) if other.verdict.get("verdict") == "correct"
                        else esc(verdict_category(other.verdict))))
        row += [esc(c) for c in roofline_cells(v)]
        row += [f'<span class="flags">{esc(", ".join(v.get("flags") or []))}</span>',
                f'<div class="reason">{esc(first_reason(r))}</div>']
        rows.append(row)
    n = len(header)
    return _html_table(header, rows, left={0, 2, 3, n - 2, n - 1})


def report_html(runs: list[RunData], out_dir: Path) -> str:
    esc = html.escape
    plt = _matplotlib()
    figs: list[tuple[str, str | None]] = []
    if plt is not None:
        if any(_speedups(run, "eager") for run in runs):
            figs.append(("Speed-up distribution per level", plot_distribution(plt, runs)))
            figs.append(("Per-task speed-ups, sorted", plot_sorted(plt, runs)))
        figs.append(("Verdicts per level", plot_verdicts(plt, runs)))
        if has_roofline(runs):
            figs.append(("Fraction of the roofline bound per level", plot_roofline(plt, runs)))
        if len(runs) > 1:
            figs.append(("Comparison of runs", plot_comparison(plt, runs)))
            for other in runs[1:]:
                figs.append((f"{runs[0].name} vs. {other.name}, task by task", plot_pairs(plt, runs[0], other)))
    title = "Bench report: " + " vs. ".join(r.name for r in runs)
    meta = []
    for run in runs:
        meta += [f'<p class="meta">{esc(line[2:]).replace("`", "")}</p>' for line in environment_lines(run)]
    table1, details = _summary_tables_html(runs)
    note = roofline_note(runs)
    if note:
        table1 += f'<div class="note">{_md_to_html(chr(10).join(note))}</div>'
    for run in runs:
        dist = roofline_distribution_rows(run)
        if dist:
            details += (f"<h2>Fraction of the roofline bound per level{': ' + esc(run.name) if len(runs) > 1 else ''}"
                        "</h2>" + _html_table(DISTRIBUTION_HEADER, [[esc(c) for c in row] for row in dist], {0, 1}))
        rows = headroom_rows(run)
        if rows:
            details += (f"<h2>Most headroom under torch.compile{': ' + esc(run.name) if len(runs) > 1 else ''}</h2>"
                        + _html_table(HEADROOM_HEADER, [[esc(c) for c in row] for row in rows], {0, 1, 2}))
    body = [f"<h1>{esc(title)}</h1>", *meta, f'<p class="meta">generated {esc(time.strftime("%Y-%m-%d %H:%M"))}</p>',
            table1, "<h2>Definitions</h2>", f'<div class="defs">{_md_to_html(DEFINITIONS)}</div>', "<h2>Plots</h2>"]
    if plt is None:
        body.append('<p class="note">Plots need matplotlib (pip install matplotlib); the tables are complete.</p>')
    elif not any(_speedups(run, "eager") for run in runs):
        body.append('<p class="note">No correct attempt: there are no speed-ups to plot.</p>')
    else:
        body.append('<p class="note">Speed-up plots: solid line 1.0x; dashed line 1.05x, the paper\'s "faster" '
                    "threshold. Only correct attempts have speed-ups.</p>")
    for caption, png in figs:
        if png:
            body.append(f'<h3>{esc(caption)}</h3><img alt="{esc(caption)}" src="data:image/png;base64,{png}">')
    body.append(details)
    body.append(f"<h2>Per-task results: {esc(runs[0].name)}</h2>")
    body.append(_tasks_html(runs[0], out_dir, runs[1:]))
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


def _md_to_html(text: str) -> str:
    """The definitions list: '- ' items, **bold**, `code`."""
    import re

    items, current = [], []
    for line in text.splitlines():
        if line.startswith("- ") and current:
            items.append(" ".join(current))
            current = []
        current.append(line[2:] if line.startswith("- ") else line.strip())
    if current:
        items.append(" ".join(current))
    out = []
    for item in items:
        s = html.escape(item)
        s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
        s = re.sub(r"\*(.+?)\*", r"<i>\1</i>", s)
        s = re.sub(r"`(.+?)`", r"<code>\1</code>", s)
        out.append(f"<li>{s}</li>")
    return f"<ul>{''.join(out)}</ul>"


def write_report(runs: list[RunData], out_dir: str | Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "report.md", "html": out_dir / "report.html", "tasks": out_dir / "tasks.md",
             "summary": out_dir / "summary.json"}
    paths["markdown"].write_text(report_markdown(runs))
    paths["html"].write_text(report_html(runs, out_dir))
    paths["tasks"].write_text("\n".join(tasks_markdown(run) for run in runs))
    paths["summary"].write_text(json.dumps(summary_json(runs), indent=1))
    plt = _matplotlib()
    if plt is not None and has_roofline(runs):  # a file as well, for RESULTS.md and papers
        paths["roofline_plot"] = out_dir / "roofline.png"
        paths["roofline_plot"].write_bytes(base64.b64decode(plot_roofline(plt, runs)))
    return paths
