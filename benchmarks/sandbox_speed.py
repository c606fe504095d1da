"""Sandbox speed figures (issue: sandbox core), measured side by side in one run on the GPU host.

    python3 benchmarks/sandbox_speed.py [--out results.json] [--skip-load-inline]
        [--parts build,baselines,repeat,calibrate,hardening]

1. Cold build of a one-kernel workspace solution vs ``load_inline`` with torch/extension.h for
   the same kernel (fresh caches for both), and the rebuild of unchanged sources.
2. Baselines: a first and a second evaluation of the same task (the second reads SQLite).
3. Repeatability: the same solution evaluated in 5 separate processes (``cuda-agent eval``);
   ``--repeat-extra TASK:SOLUTION`` repeats it for a second pair (e.g. a compute-bound kernel that
   owns no cuBLAS handle, to tell the harness's spread from one kernel's).
4. Calibration: the task's own Model as the candidate (``--calibrate``).
5. Cost of hardening: the same evaluation with the dynamic guards off (``--no-strict``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWISH_WS = ROOT / "examples" / "swish" / "solution"
SWISH_INLINE = ROOT / "tests" / "solutions" / "honest_swish_inline.py"
GEMM_TASK = ROOT / "tests" / "tasks" / "linear_relu.py"
GEMM_SOL = ROOT / "tests" / "solutions" / "honest_linear_relu"


def timed_subprocess(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, p


def eval_json(args: list[str], cache: Path) -> dict:
    env = dict(os.environ, CUDA_AGENT_CACHE=str(cache))
    p = subprocess.run([sys.executable, "-m", "cuda_agent.cli", "eval", *args, "--json"], env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"eval failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def bench_build(skip_inline: bool) -> dict:
    from cuda_agent.sandbox import SandboxConfig, build, load_solution

    out: dict = {}
    if not skip_inline:
        import_s, _ = timed_subprocess([sys.executable, "-c", "import torch, torch.utils.cpp_extension"])
        ext_dir = tempfile.mkdtemp(prefix="li_")
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=ext_dir)
        env.pop("TORCH_CUDA_ARCH_LIST", None)
        total, p = timed_subprocess([sys.executable, "-c", f"import runpy; runpy.run_path({str(SWISH_INLINE)!r})"], env)
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-3000:])
        out.update(load_inline_total_s=round(total, 2), python_import_torch_s=round(import_s, 2),
                   load_inline_build_s=round(total - import_s, 2))
        shutil.rmtree(ext_dir, ignore_errors=True)
    cold = []
    for _ in range(3):
        cache = Path(tempfile.mkdtemp(prefix="ws_"))
        ws = Path(tempfile.mkdtemp(prefix="sol_")) / "solution"
        shutil.copytree(SWISH_WS, ws)
        cfg = SandboxConfig(cache_dir=cache)
        r = build(load_solution(ws), cfg)
        assert r.ok, r.log
        cold.append(r.build_s)
        re_ = [build(load_solution(ws), cfg).build_s for _ in range(5)]
        shutil.rmtree(cache, ignore_errors=True)
    out.update(workspace_cold_build_s=[round(c, 3) for c in cold], workspace_rebuild_s_max=round(max(re_), 5))
    if "load_inline_build_s" in out:
        out["cold_build_ratio"] = round(statistics.median(cold) / out["load_inline_build_s"], 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-load-inline", action="store_true")
    ap.add_argument("--parts", default="build,baselines,repeat,calibrate,hardening",
                    help="comma-separated subset to run (baselines is needed by the later parts)")
    ap.add_argument("--calibrate-runs", type=int, default=2,
                    help="calibration evaluations (more than 2: their repeatability too)")
    ap.add_argument("--repeat-extra", default=None, metavar="TASK:SOLUTION",
                    help="also run the repeatability part on this pair (its first evaluation fills the baselines)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    res: dict = {"date": time.strftime("%Y-%m-%d"), "argv": sys.argv}
    import torch
    res["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    res["torch"] = torch.__version__

    if "build" in parts:
        res["build"] = bench_build(args.skip_load_inline)
        print("build:", json.dumps(res["build"]), flush=True)
    if not parts - {"build"}:
        _write(args.out, res)
        return

    cache = Path(tempfile.mkdtemp(prefix="bench_cache_"))
    task_sol = [str(GEMM_TASK), str(GEMM_SOL)]
    first = eval_json(task_sol, cache)
    second = eval_json(task_sol, cache)
    res["baselines"] = {"first_baseline_s": first["baseline_s"], "first_compile_s": first["timing"].get("compile_s"),
                        "second_baseline_s": second["baseline_s"], "second_cached": second["baseline_cached"],
                        "second_build_s": second["build_s"], "eager_ms": first["eager_ms"],
                        "compile_ms": first["compile_ms"], "verdicts": [first["verdict"], second["verdict"]]}
    print("baselines:", json.dumps(res["baselines"]), flush=True)

    _write(args.out, res)
    runs = [second]
    if "repeat" in parts or "hardening" in parts:
        runs += [eval_json(task_sol, cache) for _ in range(4)]
        res["repeatability"] = repeat_figures(runs)
        print("repeatability:", json.dumps(res["repeatability"]), flush=True)
        _write(args.out, res)
    if "calibrate" in parts:
        cal = [eval_json([str(GEMM_TASK), "--calibrate"], cache) for _ in range(args.calibrate_runs)]
        res["calibration"] = {"speedup_vs_eager": [c["speedup_vs_eager"] for c in cal], "ms": [c["ms"] for c in cal],
                              "verdicts": [c["verdict"] for c in cal]}
        if len(cal) > 2:  # torch's own GEMM in the candidate's place, in separate processes
            res["calibration"]["repeatability"] = repeat_figures(cal)
        print("calibration:", json.dumps(res["calibration"]), flush=True)
        _write(args.out, res)
    if "hardening" in parts:
        loose = [eval_json(task_sol + ["--no-strict"], cache) for _ in range(2)]
        res["hardening"] = {"strict_eval_s_median": statistics.median(r["eval_s"] for r in runs),
                            "no_strict_eval_s_median": statistics.median(r["eval_s"] for r in loose),
                            "strict_ms_median": statistics.median(r["ms"] for r in runs),
                            "no_strict_ms_median": statistics.median(r["ms"] for r in loose)}
        print("hardening:", json.dumps(res["hardening"]), flush=True)
        _write(args.out, res)
    if args.repeat_extra:  # last, so that a failure here costs none of the figures above
        pair = args.repeat_extra.split(":")
        try:
            eval_json(pair, cache)  # baselines (torch.compile) outside the five
            extra = [eval_json(pair, cache) for _ in range(5)]
        except RuntimeError as e:
            res["repeatability_extra"] = {"pair": pair, "error": str(e)[-2000:]}
        else:
            res["repeatability_extra"] = {"pair": pair, "eager_ms": extra[0]["eager_ms"], **repeat_figures(extra)}
        print("repeatability (extra):", json.dumps(res["repeatability_extra"]), flush=True)
        _write(args.out, res)


def repeat_figures(runs: list[dict]) -> dict:
    """The repeatability figures of verdicts of one (task, solution) from separate processes."""
    ms = [r["ms"] for r in runs]
    return {"ms": ms, "max_over_min": round(max(ms) / min(ms), 4) if all(ms) else None,
            "eval_s": [r["eval_s"] for r in runs], "verdicts": [r["verdict"] for r in runs],
            "warmup": [r["timing"].get("warmup") for r in runs],
            "phases_s": [r["timing"].get("phases_s") for r in runs],
            # which kernels each process ran (does cuBLAS choose the same algorithm in every process?)
            "kernels": [[(k["name"][:90], k["us_per_call"]) for k in r["timing"].get("profile") or []] for r in runs]}


def _write(path: str | None, res: dict) -> None:
    """Written after every part, so a run cut short by a time limit keeps what it measured."""
    if path:
        Path(path).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
