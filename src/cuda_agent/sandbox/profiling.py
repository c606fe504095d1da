"""Profiling for people and agents: which kernels run, and for how long, in eager, in
torch.compile and in the candidate. Optionally an Nsight Compute summary of the candidate's
top kernels, when ``ncu`` exists.

The candidate runs in a guarded worker exactly as in :func:`evaluate`; nothing here decides a
verdict. Failures are returned as ``ProfileReport.error`` text.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..tasks import Task, validate_task
from . import roofline
from .baselines import BaselineStore
from .build import build
from .config import SandboxConfig
from . import confine
from .evaluator import (candidate_jail, candidate_setup, reference_setup, restrain_candidate, stage_candidate,
                        traced_calls, worker_env)
from .gpu import GpuLock, no_gpu_reason
from .process import WorkerDied, WorkerError, WorkerProcess, WorkerTimeout, start_worker
from .solution import Solution

NCU_METRICS = ("gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,"
               "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,"
               "launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active")


@dataclass
class KernelRow:
    name: str
    count: int
    us_per_iter: float
    share: float


@dataclass
class ProfileReport:
    eager: list[KernelRow] = field(default_factory=list)
    compile: list[KernelRow] = field(default_factory=list)
    candidate: list[KernelRow] = field(default_factory=list)
    ncu: list[dict] = field(default_factory=list)
    roofline: dict | None = None
    """The roofline block (sandbox/roofline.py) with each target's kernel time per call as its time:
    kernel time leaves out launch gaps, so these fractions run higher than a verdict's."""
    error: str | None = None

    def table(self, top: int = 8) -> str:
        """A short text table per target, largest kernels first."""
        out = []
        for label, rows in (("eager", self.eager), ("torch.compile", self.compile), ("candidate", self.candidate)):
            if not rows:
                continue
            total = sum(r.us_per_iter for r in rows)
            out.append(f"== {label}: {total:.1f} us of kernels per call")
            for r in rows[:top]:
                out.append(f"  {r.us_per_iter:9.1f} us {100 * r.share:5.1f}%  x{r.count:<4d} {r.name[:90]}")
        line = roofline.summary_line(self.roofline)
        if line:
            out.append(f"== headroom, by kernel time per call: {line}")
        if self.ncu:
            out.append("== ncu (candidate's top kernels)")
            for k in self.ncu:
                out.append("  " + ", ".join(f"{key}={val}" for key, val in k.items())[:220])
        if self.error:
            out.append(f"error: {self.error}")
        return "\n".join(out)


def _rows(kernels: list[dict], iters: int) -> list[KernelRow]:
    total = sum(k["cuda_us"] for k in kernels) or 1.0
    return [KernelRow(k["name"], k["count"] // iters, k["cuda_us"] / iters, k["cuda_us"] / total)
            for k in kernels]


def profile(task: Task, solution: Solution, config: SandboxConfig | None = None, use_ncu: bool = False,
            iters: int = 3) -> ProfileReport:
    config = config or SandboxConfig()
    report = ProfileReport()
    reason = no_gpu_reason()
    if reason:
        report.error = reason
        return report
    unconfinable = confine.unavailable(config.isolation)
    if unconfinable:
        report.error = unconfinable
        return report
    module = validate_task(task)
    init_inputs = list(module.get_init_inputs())
    built = build(solution, config)
    if not built.ok:
        report.error = "build failed:\n" + built.log
        return report
    env = worker_env(config)
    seed = config.seed if config.seed is not None else 0
    timing = {"warmup_ms": 5.0, "rep_ms": 10.0, "min_iters": 1, "max_iters": 20}
    workers: list[WorkerProcess] = []
    lock, hold = GpuLock(config.cache_dir, config.device), None
    try:
        ref = start_worker(env, "reference", config.spare_workers)
        workers.append(ref)
        cand_env = worker_env(config, built)
        cand = start_worker(cand_env, "candidate", config.spare_workers if cand_env == env else 0,  # loads meanwhile
                            candidate_jail(config))
        workers.append(cand)
        restrain_candidate(cand, config)
        setup = ref.request(reference_setup(task, config, seed, init_inputs), config.baseline_timeout_s)
        cand_msg = candidate_setup(task, solution, built, dataclasses.replace(config, strict=True, calibrate=False),
                                   seed, init_inputs, setup["state_dict"], cand)
        hold = lock.candidate_code()  # candidate code runs from here on: no baseline is timed meanwhile
        with lock.shared(busy=False):  # its import, construction and prepare() may run kernels
            cand.request(cand_msg, config.run_timeout_s)
        # the reference keeps its shared weights (share.WEIGHTS) for the profile's life: the ncu run below
        # starts another candidate worker from the same cand_msg, whose descriptors must still open them
        # two input sets drawn by the reference worker on the GPU; the candidate's workers get shared copies
        timing["inputs"] = ref.request({"op": "rotation", "seeds": [seed, seed + 1]}, config.run_timeout_s)["sets"]
        with lock.exclusive():
            for worker, target, attr in ((ref, "model", "eager"), (ref, "compile", "compile"),
                                         (cand, "model", "candidate")):
                worker.request({"op": "prepare_timing", "target": target, **timing}, config.baseline_timeout_s)
                prof = worker.request({"op": "profile", "iters": iters}, config.run_timeout_s)
                setattr(report, attr, _rows(prof["kernels"], traced_calls(prof)))
        report.roofline = _roofline(setup, config, report)
        if use_ncu:
            report.ncu = _ncu(solution, built, cand_msg, env=cand_env, config=config, timing=timing,
                              kernels=[r.name for r in report.candidate[:3]], lock=lock)
    except WorkerError as e:
        report.error = f"{e.reply.get('error_type')} in '{e.reply.get('phase')}': {e.reply.get('message', '')[:800]}"
    except (WorkerDied, WorkerTimeout) as e:
        report.error = str(e)
    finally:
        for w in workers:
            w.cleanup(wait=False)
        if hold is not None:  # once the candidate's processes are gone
            hold.release([g for w in workers for g in w.groups()])
    return report


def _roofline(setup: dict, config: SandboxConfig, report: ProfileReport) -> dict | None:
    """The bound from the reference worker's count (meta device), against each target's kernel time."""
    work = roofline.Work.from_dict(setup["work"]) if setup.get("work") else None
    if work is None or work.input_bytes is None:
        return None
    measured = BaselineStore(config.cache_dir / "baselines.sqlite").get_bandwidth(setup["gpu"], setup["torch"])

    def ms(rows: list[KernelRow]) -> float | None:
        return sum(r.us_per_iter for r in rows) / 1e3 or None

    return roofline.assess(gpu_name=setup["gpu"], precision=config.precision, work=work,
                           input_bytes=work.input_bytes, param_bytes=work.param_bytes or 0,
                           output_bytes=work.output_bytes or 0, measured_gbs=measured, ms=ms(report.candidate),
                           eager_ms=ms(report.eager), compile_ms=ms(report.compile)).to_dict()


def _ncu(solution: Solution, built, cand_msg: dict, env: dict, config: SandboxConfig, timing: dict,
         kernels: list[str], lock: GpuLock) -> list[dict]:
    """Nsight Compute on the candidate's top kernels (a few launches each), as rows of metrics. Confined
    like any candidate worker: ncu writes its report into the worker's own scratch. Its replays hold the GPU
    lock shared: no other evaluation's timing runs beside them (their trials may)."""
    ncu = shutil.which("ncu")
    if ncu is None or not kernels:
        return [{"note": "ncu not found"}] if ncu is None else []
    jail = candidate_jail(config)
    host_dir = Path(tempfile.mkdtemp(prefix="ncu_"))
    out_csv = host_dir / "ncu.csv"
    names = "|".join(sorted({k.split("(")[0].split("<")[0].replace("void ", "").strip() for k in kernels}))
    prefix = [ncu, "--clock-control", "none", "--target-processes", "all", "--csv", "--page", "raw",
              "--metrics", NCU_METRICS, "--kernel-name", f"regex:{names}", "--launch-count", "6",
              "--log-file", str(out_csv) if jail is None else f"{confine.INSIDE}/ncu.csv"]
    worker = WorkerProcess(env=env, cwd=str(solution.root), label="candidate-ncu", prefix=prefix, jail=jail)
    restrain_candidate(worker, config)
    if jail is not None:
        out_csv = Path(worker.scratch) / "ncu.csv"
        cand_msg = {**cand_msg, "solution": stage_candidate(solution, built, worker)}
    try:
        with lock.shared():
            worker.request(cand_msg, config.run_timeout_s * 4)
            worker.request({"op": "prepare_timing", "target": "model", **{**timing, "max_iters": 2}},
                           config.run_timeout_s * 4)
            worker.close()  # ncu writes its report as the worker exits
        if not out_csv.exists():
            return [{"error": "ncu wrote no report"}]
        text = out_csv.read_text(errors="replace")
    except (WorkerError, WorkerDied, WorkerTimeout) as e:
        return [{"error": str(e)[:300]}]
    finally:
        worker.close()
        worker.cleanup()
        shutil.rmtree(host_dir, ignore_errors=True)
    start = text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
    keep = ("Kernel Name", *NCU_METRICS.split(","))
    return [{k: r.get(k) for k in keep if r.get(k)} for r in rows[1:] if r.get("Kernel Name")][:6]
