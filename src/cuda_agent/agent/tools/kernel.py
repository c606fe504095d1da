"""`compile`, `verify`, `profile`: the sandbox, called from the agent's own process.

Each call first restores the read-only files, then snapshots ``model_new.py`` + ``kernels/`` to
``<run_dir>/candidates/<hash>/`` and hands that snapshot to the sandbox, with the trusted
in-memory Task. Nothing the agent can edit runs the check.
"""

from __future__ import annotations

import json
import time

from ...sandbox import NoGpuError, build, check_solution, rejecting
from ...sandbox.profiling import profile
from ...sandbox.roofline import summary_line
from ...sandbox.timing import host_bound_line
from . import Tool, ToolResult, obj, truncate

VERDICT_KEYS = ("verdict", "reasons", "flags", "rel_err", "max_abs_err", "tolerance", "num_trials", "ms", "eager_ms",
                "compile_ms", "speedup_vs_eager", "speedup_vs_compile", "reward")
MAX_LOG_CHARS = 4000


def trim_verdict(v: dict) -> dict:
    """The parts of a Verdict an agent acts on: verdict, reasons, flags, errors, times, speedups, log."""
    out = {k: v.get(k) for k in VERDICT_KEYS if v.get(k) not in (None, [], "")}
    warnings = [f"{f['file']}:{f['line']}: {f['message']}" for f in v.get("static_findings", [])
                if f.get("severity") == "warn"]
    if warnings:
        out["warnings"] = warnings[:10]
    if v.get("log"):
        out["log"] = truncate(v["log"], MAX_LOG_CHARS)
    return out


class Compile(Tool):
    name = "compile"
    description = ("Build kernels/*.cu and kernels/*.cpp into the `cuda_ext` library (nvcc for your GPU) and run the "
                   "static honesty rules. Returns compiler errors with file:line, or 'build ok'.")
    parameters = obj({})

    def run(self, args, env) -> ToolResult:
        solution, fp, _, notes = env.prepare_candidate()
        t0 = time.perf_counter()
        built = build(solution, env.config.sandbox)
        findings = check_solution(solution, rules=env.config.sandbox.rules)
        took = time.perf_counter() - t0
        lines = list(notes)
        if not solution.cuda_sources() and not solution.binding_sources():
            lines.append("nothing to build: kernels/ has no .cu or _binding.cpp file yet")
        elif built.ok:
            lines.append(f"build ok ({'cached, ' if built.cached else ''}{built.build_s:.1f} s)")
            if built.log.strip():
                lines.append("compiler output:\n" + built.log)
        else:
            lines.append("build timed out" if built.timeout else "build failed:")
            lines.append(built.log)
        rejects = rejecting(findings)
        if rejects:
            lines.append("static rules (verify will reject the solution for these):")
            lines += [f"  {f}" for f in rejects[:20]]
        warns = [f for f in findings if f not in rejects]
        if warns:
            lines.append("static warnings:")
            lines += [f"  {f}" for f in warns[:10]]
        return ToolResult(truncate("\n".join(lines), env.config.limits.max_output_chars),
                          ok=built.ok and not rejects, sandbox_s=took,
                          info={"fingerprint": fp, "build_ok": built.ok, "build_cached": built.cached,
                                "build_s": round(built.build_s, 3)})


class Verify(Tool):
    name = "verify"
    description = ("Check model_new.py + kernels/ in the sandbox: build, honesty rules, correctness on fresh inputs, "
                   "timing against eager PyTorch and torch.compile. Returns the verdict, errors, speedups and a log. "
                   "The best verified solution is kept.")
    parameters = obj({})

    def run(self, args, env) -> ToolResult:
        solution, fp, files, notes = env.prepare_candidate()
        t0 = time.perf_counter()
        try:
            verdict = env.evaluate(solution)
        except NoGpuError as e:
            return ToolResult("\n".join([*notes, f"cannot verify on this host: {e}"]), ok=False,
                              sandbox_s=time.perf_counter() - t0, info={"fingerprint": fp, "no_gpu": True})
        took = time.perf_counter() - t0
        v = verdict.to_dict()
        note = env.record_verdict(v, fp, files, solution.path)
        body = json.dumps(trim_verdict(v), indent=1)
        headroom = summary_line(v.get("roofline"))
        host = host_bound_line((v.get("timing") or {}).get("host_bound"))
        lines = [*notes, body, *([f"headroom: {headroom}"] if headroom else []), *([host] if host else []), note]
        return ToolResult("\n".join(lines), ok=verdict.ok, sandbox_s=took, verdict=v,
                          info={"fingerprint": fp})


class Profile(Tool):
    name = "profile"
    description = ("Profile eager PyTorch, torch.compile and your ModelNew: kernels launched and their time per call. "
                   "With ncu=true, also Nsight Compute metrics of your top kernels (slower).")
    parameters = obj({"ncu": {"type": "boolean", "description": "add Nsight Compute metrics (default false)"}})

    def run(self, args, env) -> ToolResult:
        solution, fp, _, notes = env.prepare_candidate()
        t0 = time.perf_counter()
        report = profile(env.task, solution, env.config.sandbox, use_ncu=bool(args.get("ncu", False)))
        took = time.perf_counter() - t0
        table = report.table() or "(no kernels recorded)"
        has_rows = bool(report.eager or report.compile or report.candidate)
        return ToolResult(truncate("\n".join([*notes, table]), env.config.limits.max_output_chars),
                          ok=has_rows, sandbox_s=took, info={"fingerprint": fp, "error": report.error})
