"""The trusted evaluator: (Task, Solution) -> Verdict.

This process loads the task, chooses fresh seeds, and decides from the scalars and small reports
two worker processes send back. It never imports candidate code, and no task-sized tensor reaches it:
the reference worker draws every input set on the GPU, shares copies with the candidate's worker
(CUDA IPC, share.py) and judges the outputs the candidate shares back.

    static rules ─┐
    build (CPUs) ─┼─ reference worker: weights, input sets, reference outputs, judging, eager + compile timing
                  └─ candidate worker: import under guards, trials, timing, re-check, kernel census

Every failure of the candidate (a compile error, a crash, a hang, a cheat) ends as a Verdict;
only bad *input* (an unreadable task) and a host without a GPU raise. A failure that is not the
candidate's (the reference crashed or hung, a worker was SIGKILLed from outside, the harness raised)
is the verdict ``harness_error``, reward null, flagged ``reference_error``, ``worker_killed`` or
``harness_exception``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import secrets
import shutil
import signal
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..tasks import Task, TaskError, validate_task
from . import confine, memory
from . import inputs as trial_inputs
from . import roofline, timing
from .baselines import Baseline, BaselineStore
from .build import BuildResult, build, stage_solution
from .compare import Comparison, is_precision_downgrade
from .config import SandboxConfig
from .gpu import GpuLock, GpuMemory, gpu_memory_bytes, no_gpu_reason, rehearsal
from .logs import trim_traceback
from .memory import peak_rss_mb, reset_peak_rss
from .process import (MAX_UNTRUSTED_REPLY, BadReply, ReplyTooLong, WorkerDied, WorkerError, WorkerOverMemory,
                      WorkerProcess, WorkerTimeout, candidate_jail, cpus_of, start_worker, worker_env)
from .reward import paper_reward
from .share import WEIGHTS
from .solution import REFERENCE, Solution, SolutionError, reference_solution
from .static import BROKEN, KERNELBENCH, NO_MODEL_NEW, check_solution, rejecting
from .verdict import COMPILE_ERROR, CORRECT, HARNESS_ERROR, INCORRECT, REJECTED, RUNTIME_ERROR, TIMEOUT, Verdict

# Kernels a candidate may launch besides its own: vendor GEMM/conv libraries, memsets and
# copies, and torch's fill/copy kernels behind the allowed allocation and layout operators.
LIBRARY_KERNELS = re.compile(r"cutlass|gemm|Gemm|GEMM|xmma|cublas|cudnn|nvjet|implicit_convolve|"
                             r"winograd|fft|^Memset|^Memcpy|^\[memory\]|^void cub::|cub::CUB_|thrust::|FillFunctor|"
                             r"direct_copy_kernel|copy_kernel|CatArrayBatchedCopy|_cudnn|sm90_|sm80_")
TORCH_KERNELS = re.compile(r"at::native|at_cuda_detail|^triton_|\(anonymous namespace\)::|"
                           r"^void at::|c10::|pytorch|flash_fwd|fmha")
GLOBAL_FN = re.compile(r"__global__[^;{(]*?\b(\w+)\s*\(")


class NoGpuError(RuntimeError):
    """Raised (not a verdict) when this host cannot run GPU code at all."""


class ConfinementUnavailable(NoGpuError):
    """Raised (not a verdict) when candidate code cannot be confined here (sandbox/confine.py) and
    isolation was not turned off: the evaluation refuses to start rather than run it unconfined."""


@dataclass
class _Timed:
    ms: float
    gpu_median_ms: float
    wall_median_ms: float
    evaluator_ms_per_iter: float
    n: int
    gap_ms: float
    reply: dict
    """The worker's reply (its integrity diff, per-call samples)."""
    earlier: list = field(default_factory=list)
    """Replies of the candidate's timing attempts set aside (their timed outputs are checked too)."""


def evaluate(task: Task, solution: Solution | None, config: SandboxConfig | None = None) -> Verdict:
    """Evaluate ``solution`` against ``task``. ``solution=None`` with ``config.calibrate``
    evaluates the task's own Model as the candidate."""
    config = config or SandboxConfig()
    if solution is None or config.calibrate:
        config = dataclasses.replace(config, calibrate=True)
        solution = reference_solution(task.path) if task.path else Solution(REFERENCE, Path(task.name))
    v = Verdict(task=task.name, solution=solution.to_str())
    v.precision = {"mode": config.precision}
    v.rules = config.rules
    reset_peak_rss()
    t0 = time.perf_counter()
    try:
        _Evaluation(task, solution, config, v).run()
    except (NoGpuError, TaskError, SolutionError):
        raise  # no GPU, or bad input: nothing was judged
    except Exception as e:  # noqa: BLE001 - the harness's own failure is data, never the candidate's
        v.verdict = HARNESS_ERROR
        v.reasons.insert(0, f"the harness raised {type(e).__name__}: {str(e)[:300]} (not the candidate's failure)")
        v.flag("harness_exception")
        v.log = (traceback.format_exc()[-4000:] + ("\n" + v.log if v.log else "")).strip()
    finally:
        v.eval_s = round(time.perf_counter() - t0, 3)
        v.reward = paper_reward(v)
    return v


class _Evaluation:
    def __init__(self, task: Task, solution: Solution, config: SandboxConfig, verdict: Verdict):
        self.task, self.solution, self.config, self.v = task, solution, config, verdict
        self.ref: WorkerProcess | None = None
        self.ref_gap_ms = 0.0
        """The reference worker's gap on a trivial call: what the candidate's gap curve is bounded by."""
        self.cand: WorkerProcess | None = None
        self.seed = config.seed if config.seed is not None else secrets.randbits(30)
        self.baseline_claim = None
        self.checksum_seed = secrets.randbits(40)
        self.out_bytes: list[int] | None = None  # sizes of the reference's output leaves (poisoned allocations)
        self.set_bytes: int | None = None  # bytes of one input set, as drawn
        self.work: dict | None = None  # the reference's FLOPs (roofline.Work), from its worker
        self.param_bytes = 0  # the bytes of the reference Model's state_dict
        self.measured_gbs: float | None = None  # the copy bandwidth measured on this GPU (roofline)
        self.gpu_memory: GpuMemory | None = None  # what this evaluation reserved of the GPU's memory
        self.gpu_need: int | None = None  # what it was expected to need (memory.gpu_need; None: size unknown)
        self.code_hold = None  # held while the candidate's code may run (GpuLock.candidate_code)
        self.quiet = True  # whether what this evaluation measures for the cache was measured quiet (GpuLock.quiet)
        self.jail = candidate_jail(config)  # how the candidate's worker is confined (None: unconfined)
        self.oom_kills = memory.oom_kills()  # the host's count, to tell the OOM killer's SIGKILL from others
        self._t_mark = time.perf_counter()

    # ------------------------------------------------------------------ driver
    def run(self) -> None:
        v, cfg = self.v, self.config
        if not self._static():
            return
        unconfinable = confine.unavailable(cfg.isolation)
        if unconfinable:  # before the build: a single-file solution's build runs its code
            raise ConfinementUnavailable(unconfinable)
        v.confinement = confine.describe(cfg.isolation, share_pid=self.jail is not None and self.jail.share_pid)
        reason = no_gpu_reason()
        if reason:  # still build, so that compile errors are verdicts on any host
            if self._build() is not None:
                raise NoGpuError(reason)
            return
        env = worker_env(cfg)
        try:
            self.ref_env = env
            # first, so that its interpreter, torch and CUDA start while the task is checked and the build runs
            self.ref = start_worker(env, "reference", cfg.spare_workers)
            module = validate_task(self.task)
            init_inputs = list(module.get_init_inputs())
            self.ref_setup = reference_setup(self.task, cfg, self.seed, init_inputs)
            self.store = BaselineStore(cfg.cache_dir / "baselines.sqlite")
            known = self.store.get_sizes(self.task.sha256, torch.__version__) if cfg.use_baseline_cache else None
            if known:  # read on the meta device by an earlier evaluation: the worker need not run it there again
                self.ref_setup["sizes"] = known
            self.ref.send(self.ref_setup)
            built = self._build()
            if built is None:
                return
            self._mark("build")
            # started now, so that its interpreter and torch load while the reference sets up
            cand_env = worker_env(cfg, built)  # a load_inline build's own env: no spares for it
            self.cand = start_worker(cand_env, "candidate", cfg.spare_workers if cand_env == env else 0, self.jail)
            restrain_candidate(self.cand, cfg)
            ref_info = self._ref_step(lambda: self.ref.receive("setup", cfg.baseline_timeout_s))
            if ref_info is None:
                return
            v.gpu, v.torch_version = ref_info["gpu"], ref_info["torch"]
            self.ref_gap_ms = timing.gap_at(ref_info.get("gap_curve"), 0.0)  # the trusted trivial-call gap
            self._started("reference", self.ref, ref_info)
            # the weights reach the candidate on the GPU; its ModelNew is built on the host first, as in KernelBench
            self.param_bytes = ref_info.get("param_bytes") or 0
            restrain_candidate(self.cand, cfg, extra_mb=3 * self.param_bytes / 2**20)
            v.precision["baseline"] = ref_info["precision"]
            v.timing["footprint"] = ref_info.get("footprint")
            self.work = ref_info.get("work")
            if cfg.use_baseline_cache and not (ref_info.get("footprint") or {}).get("cached") and ref_info.get("sizes"):
                self.store.put_sizes(self.task.sha256, torch.__version__, ref_info["sizes"])
            self._mark("reference_setup")
            if ref_info.get("does_not_fit"):  # said before anything runs, not a worker SIGKILLed half way
                v.fail(HARNESS_ERROR, ref_info["does_not_fit"])
                v.flag("does_not_fit")
                return
            self._reserve_gpu_memory(ref_info)
            if self.jail is not None and not self._confinement_holds():
                return
            # GPU work from here on holds the GPU lock, shared, so that no other evaluation's timing overlaps
            # it: the compile baseline's first run and the candidate's import, construction and prepare()
            # (busy=False: mostly CPU time, not counted as the GPU in use)
            self.lock = GpuLock(cfg.cache_dir, cfg.device)
            # The baselines are timed before any of the candidate's code is loaded. Timed after it, a thread or
            # a kernel the candidate left running (started at import, on a side stream) could slow eager and
            # compile on the GPU or the host and so raise its speed-ups, and the slow baseline would be cached
            # for every later evaluation of the task.
            self.ref_state_dict = ref_info["state_dict"]  # the weights the candidate loads (a restart replaces them)
            if not self._warm_compile(module):
                return
            self._mark("compile")
            if not self._baselines_first(ref_info):
                return
            self._mark("baselines")
            # from here until its worker's processes are gone, this candidate's code may run on the GPU: no other
            # evaluation times a baseline meanwhile (GpuLock.quiet)
            self.code_hold = self.lock.candidate_code()
            with self.lock.shared(busy=False):
                cand_info = self._cand_step(lambda: self.cand.request(candidate_setup(
                    self.task, self.solution, built, cfg, self.seed, init_inputs, self.ref_state_dict,
                    self.cand), cfg.run_timeout_s))
            if cand_info is None:
                return
            self._drop([WEIGHTS])  # the candidate has its own copy of the weights now
            v.precision["candidate"] = cand_info["precision"]
            self._started("candidate", self.cand, cand_info)
            self._mark("candidate_setup")
            if not self._integrity_ok(cand_info, "while importing and preparing ModelNew"):
                return
            try:
                self._gpu_phase(module)
            finally:
                self._mark("gpu_phase")
                v.timing["gpu_lock_s"] = round(self.lock.held_s, 3)
                v.timing["gpu_exclusive_s"] = round(self.lock.exclusive_s, 3)
                v.timing["gpu_lock_intervals"] = self.lock.intervals
                v.timing["gpu_lock_setup_s"] = round(self.lock.setup_s, 3)
                v.timing["gpu_uuid"] = self.lock.key
            self._roofline()
        finally:
            try:
                self._over_memory()
                self._memory_figures()
                if self.baseline_claim is not None:
                    self.baseline_claim.close()
                for w in (self.cand, self.ref):  # nothing left to say to them: no graceful exit to wait for
                    if w is not None:
                        w.cleanup(wait=False)
            finally:
                if self.code_hold is not None:  # released once the candidate's processes are gone
                    self.code_hold.release(self.cand.groups() if self.cand is not None else [], background=True)
                if self.gpu_memory is not None:  # counted for the others until the workers' processes are gone
                    self.gpu_memory.release([g for w in (self.cand, self.ref) if w is not None for g in w.groups()])

    def _reserve_gpu_memory(self, ref_info: dict) -> None:
        """Hold what this evaluation is expected to need of the GPU's memory (memory.gpu_need) before its
        trials make the task's tensors there, beside other evaluations sharing the GPU (bench --per-gpu > 1);
        an evaluation of unknown size waits until it has the GPU to itself."""
        cfg, fp = self.config, (ref_info.get("sizes") or {}).get("footprint") or {}
        total = self.ref_setup["gpu_bytes"]  # gpu_memory_bytes, as the reference's fit check had it
        need = self.gpu_need = memory.gpu_need(fp.get("input_bytes"), fp.get("output_bytes"), self.param_bytes)
        need = (total or 0) if need is None else need
        self.gpu_memory = GpuMemory(cfg.cache_dir, cfg.device, int(total * 0.95) if total else None)
        # while it waits, it holds two CUDA contexts and the reference's weights already
        reserved = self.gpu_memory.reserve(need, cfg.gpu_memory_wait_s, holding=self.param_bytes + (1 << 30))
        self.v.timing["gpu_memory"] = {"reserved_mb": round(need / 2**20),
                                       "waited_s": round(self.gpu_memory.waited_s, 3)}
        if not reserved:
            self.v.timing["gpu_memory"]["unreserved"] = "the wait for other evaluations' memory timed out"

    def _memory_figures(self) -> None:
        """Peak host RSS of the evaluator and of each worker, and peak GPU memory of each worker, for this
        evaluation (workers are fresh per evaluation; the evaluator's peak was reset when it began).
        ``peak_host_rss_mb`` sums the three peaks; ``peak_host_pss_mb`` takes from each the part of its
        resident set that PSS gives to others (``memory.others_share_mb``, read at its last reply): the
        pages of torch's and CUDA's libraries, which all three map and the host holds once."""
        mem = {"evaluator_peak_rss_mb": peak_rss_mb(), "evaluator_others_share_mb": memory.others_share_mb()}
        for name, w in (("reference", self.ref), ("candidate", self.cand)):
            if w is not None and w.memory:
                mem[f"{name}_peak_rss_mb"] = w.memory.get("peak_rss_mb")
                mem[f"{name}_peak_gpu_mb"] = w.memory.get("peak_gpu_mb")
                mem[f"{name}_others_share_mb"] = w.memory.get("others_share_mb")
        self.v.timing["memory"] = mem
        rss = [x for k, x in mem.items() if k.endswith("_rss_mb") and isinstance(x, (int, float))]
        gpu = [x for k, x in mem.items() if k.endswith("_gpu_mb") and isinstance(x, (int, float))]
        self.v.timing["peak_host_rss_mb"] = round(sum(rss), 1)  # an upper bound: the peaks need not coincide
        pss = []
        for k, peak in mem.items():
            if k.endswith("_peak_rss_mb") and isinstance(peak, (int, float)):
                share = mem.get(k.replace("_peak_rss_mb", "_others_share_mb"))
                share = share if isinstance(share, (int, float)) and 0 <= share <= peak else 0.0  # unknown: in full
                pss.append(peak - share)
        self.v.timing["peak_host_pss_mb"] = round(sum(pss), 1)
        if gpu:
            self.v.timing["peak_gpu_mb"] = round(sum(gpu), 1)

    def _started(self, role: str, worker: WorkerProcess, info: dict) -> None:
        """How the worker's start and setup went (seconds), under timing["workers"]: where a setup phase's
        time goes. The candidate's figures come from its own process: diagnostics, never part of a verdict."""
        started = info.get("started") if isinstance(info.get("started"), dict) else {}

        def seconds(x):
            return x if isinstance(x, float) and math.isfinite(x) else None

        steps = started.get("steps_s") if isinstance(started.get("steps_s"), dict) else {}
        self.v.timing.setdefault("workers", {})[role] = {
            "from_pool": worker.from_pool, "boot_s": seconds(started.get("boot_s")),
            "waited_s": seconds(started.get("waited_s")), "warm_s": seconds(started.get("warm_s")),
            "boot_steps_s": {k: seconds(started.get(k)) for k in ("python_s", "torch_s", "harness_s", "compiler_s")
                             if k in started},
            "steps_s": {str(k)[:32]: seconds(x) for k, x in list(steps.items())[:16]},
            "cpus": cpus_of(worker.proc.pid)}
        if isinstance(started.get("compiler_error"), str):  # a spare whose preload failed (the step needing it says)
            self.v.timing["workers"][role]["preload_error"] = started["compiler_error"][:300]

    def _mark(self, phase: str) -> None:
        """Seconds since the previous mark, under timing["phases_s"] (where an evaluation's time goes)."""
        now = time.perf_counter()
        self.v.timing.setdefault("phases_s", {})[phase] = round(now - self._t_mark, 3)
        self._t_mark = now
        # each worker's peak resident set so far, from its latest reply: which phase raised a host peak
        rss = {role: w.memory.get("peak_rss_mb") for role, w in (("reference", self.ref), ("candidate", self.cand))
               if w is not None and w.memory}
        rss = {role: round(float(x), 1) for role, x in rss.items() if _real(x)}  # the candidate's word: numbers only
        if rss:
            self.v.timing.setdefault("peak_rss_by_phase_mb", {})[phase] = rss

    def _gpu_phase(self, module) -> None:
        """Trials, candidate timing, timed-output checks, re-checks, census (the baselines came first).
        Every input set is drawn by the reference worker on the GPU from a seed chosen here and shared with
        the candidate's worker; outputs are judged in the reference worker: only scalars and small reports
        come back."""
        v, cfg = self.v, self.config
        plan = trial_inputs.trial_plan(cfg.num_trials)
        trials = [(f"trial {i} ({kind} inputs{', same buffers as before' if reuse else ''})", self.seed + 1 + i,
                   kind, reuse) for i, (kind, reuse) in enumerate(plan)]
        ok, skipped = self._trials(trials)
        if skipped:
            v.timing["skipped_trials"] = skipped
        if not ok:
            return
        self._drop(["trial"])  # its buffers are not needed any more
        seeds = self._rotation_seeds(self.set_bytes or 1)
        n_rot = len(seeds)
        rot = self._ref_gpu({"op": "rotation", "seeds": seeds})
        if rot is None:
            return
        rotation = rot["sets"]
        with self.lock.exclusive():  # the candidate timed with the GPU to itself (the baselines were timed first)
            timed = self._time_candidate(rotation)
        if timed is None:
            return
        mutated = self._ref_gpu({"op": "check_shared", "keys": [f"rotation {i}" for i in range(n_rot)]})
        if mutated is None:
            return
        if mutated["mutated"]:
            v.reject(f"input_mutated: the shared timing inputs ({', '.join(mutated['mutated'])}) changed while the "
                     "candidate was timed on them", "input_mutated")
            return
        self._drop([f"rotation {i}" for i in range(n_rot)])  # both rings hold their own copies
        if not rot.get("repeatable", True):
            v.timing["redraw_check"] = "off: get_inputs() does not repeat itself bit for bit"
        if self._checks_timed_outputs() and not self._timed_outputs_ok(timed):
            return
        # re-check on new values written into the buffers timing used
        n_recheck = min(cfg.num_recheck, n_rot)
        if not self._recheck([(self.seed + 2000 + i, trial_inputs.TASK if i % 2 == 0 else trial_inputs.SIGNED)
                              for i in range(n_recheck)]):
            return
        if cfg.profile or cfg.rules == KERNELBENCH:  # kernelbench: the census proves own kernels ran
            if not self._census():
                return
        self._speedups(timed)
        if v.speedup_vs_eager is not None and v.speedup_vs_eager > cfg.excessive_speedup:
            self._scrutinize()

    def _trials(self, trials: list[tuple[str, int, str, bool]], required: bool = True) -> tuple[bool, list[str]]:
        """Checked trials, one input set at a time: (label, seed, kind, reuse the previous set's buffers).
        Returns (all judged correct, the trials the reference itself could not run). ``required``: when the
        reference can run none of them, that is a harness_error (else, for extra trials, nothing)."""
        v = self.v
        skipped, judged = [], 0
        for i, (label, seed, kind, reuse) in enumerate(trials):
            keep = i + 1 < len(trials) and trials[i + 1][3]  # the next trial writes into these buffers
            ref = self._ref_gpu({"op": "ref_trial", "key": "trial", "seed": seed, "kind": kind, "reuse": reuse})
            if ref is None:
                return False, skipped
            if "skipped" in ref:  # a task that rejects some inputs (signed ones, say): not the candidate's fault
                skipped.append(f"{label}: {ref['skipped']}")
                continue
            self.out_bytes = self.out_bytes or ref["out_bytes"]
            self.work = ref.get("work") or self.work  # counted on this run when the meta device could not
            self.set_bytes = self.set_bytes or ref["in_bytes"]
            cand = self._cand_gpu({"op": "trial", "key": "trial", "inputs": ref["inputs"], "reuse": reuse,
                                   "keep": keep, "out_bytes": self.out_bytes})
            if cand is None or not self._judge(cand, "trial", label):
                return False, skipped
            judged += 1
        if not judged and not required:
            return True, skipped
        if not judged:
            v.fail(HARNESS_ERROR, "the reference Model failed on every trial input: " + skipped[0])
            v.flag("reference_error")
            return False, skipped
        return True, skipped

    def _recheck(self, sets: list[tuple[int, str]]) -> bool:
        """New values written into the very buffers the candidate was timed on, checked trials again."""
        keys, shared = [], []
        for i, (seed, kind) in enumerate(sets):
            ref = self._ref_gpu({"op": "ref_trial", "key": f"re-check {i}", "seed": seed, "kind": kind})
            if ref is None:
                return False
            if "skipped" not in ref:
                keys.append(f"re-check {i}")
                shared.append(ref["inputs"])
        self._drop([f"re-check {i}" for i in range(len(sets)) if f"re-check {i}" not in keys])
        if not keys:
            return True
        rc = self._cand_gpu({"op": "recheck", "inputs": shared, "out_bytes": self.out_bytes})
        if rc is None or not self._integrity_ok(rc, "during forward"):
            return False
        for key, trial in zip(keys, rc["trials"]):
            if not self._judge({"integrity": [], **trial}, key,
                               f"{key} after timing (new values in the timed buffers)", after_timing=True):
                return False
        self._drop(keys)
        return True

    def _drop(self, keys: list[str]) -> None:
        self._ref_step(lambda: self.ref.request({"op": "drop", "keys": keys}, self.config.run_timeout_s))

    # ------------------------------------------------------------------ steps
    def _shared(self, request, msg: dict, timeout: float) -> dict:
        """A worker request that uses the GPU without timing: shares the GPU with other evaluations."""
        with self.lock.shared():
            return request(msg, timeout)

    def _ref_gpu(self, msg: dict, timeout: float | None = None) -> dict | None:
        """A shared-GPU request to the reference worker; None when it failed (the verdict says why)."""
        return self._ref_step(lambda: self._shared(self.ref.request, msg, timeout or self.config.run_timeout_s))

    def _cand_gpu(self, msg: dict, timeout: float | None = None) -> dict | None:
        """A shared-GPU request to the candidate's worker; None when it failed (the verdict says why)."""
        return self._cand_step(lambda: self._shared(self.cand.request, msg, timeout or self.config.run_timeout_s))

    def _static(self) -> bool:
        v = self.v
        findings = check_solution(self.solution, calibrate=self.config.calibrate, rules=self.config.rules)
        v.static_findings = [f.to_dict() for f in findings]
        broken = [f for f in findings if f.rule in {r.id for r in BROKEN}]
        if broken:
            v.fail(COMPILE_ERROR, broken[0].message)
            v.log = "\n".join(str(f) for f in broken)
            return False
        rejects = [f for f in rejecting(findings) if self.config.static_rules or f.rule == NO_MODEL_NEW.id]
        if rejects:
            v.verdict = REJECTED
            for f in rejects:
                v.add_reason(str(f))
                v.flag(f.rule)
            v.log = "\n".join(str(f) for f in findings)
            return False
        return True

    def _build(self) -> BuildResult | None:
        """Build (or take from the cache); on failure record the verdict and return None."""
        built = build(self.solution, self.config)
        self.v.build_s = round(built.build_s, 3)
        if not built.ok:
            self.v.fail(TIMEOUT if built.timeout else COMPILE_ERROR,
                        "build timed out" if built.timeout else "build failed")
            self.v.log = built.log
            return None
        return built

    def _ref_step(self, call):
        """A step of the reference worker. Its failure is the harness's (the task's), never the candidate's."""
        try:
            return call()
        except WorkerError as e:
            self.v.fail(HARNESS_ERROR, f"the reference Model failed in '{e.reply.get('phase')}': "
                                       f"{e.reply.get('error_type')}: {e.reply.get('message', '')[:300]}")
            self.v.log = trim_traceback(e.reply.get("error", ""))
        except WorkerTimeout as e:
            self.v.fail(HARNESS_ERROR, f"the reference Model timed out: {e}")
        except WorkerDied as e:
            self.v.fail(HARNESS_ERROR, f"the reference worker died: {e}")
            self.v.log = e.log
            if killed_from_outside(self.ref):
                self.v.flag("worker_killed")
        self.v.flag("reference_error")
        return None

    def _over_memory(self) -> None:
        """The watchdog stopped the candidate (or stops it now, on a last look): whatever the harness was
        waiting on then, a success or a reference that failed reading the candidate's outputs, the
        verdict is the candidate's runtime error."""
        cand, v = self.cand, self.v
        if cand is None or cand.host_memory_limit_mb is None or "host_memory" in v.flags:
            return
        cand.look_at_memory()
        if cand.over_memory:
            if v.verdict in (CORRECT, HARNESS_ERROR):
                v.verdict = RUNTIME_ERROR
                v.flags = [f for f in v.flags if f not in ("reference_error", "worker_killed", "harness_exception",
                                                           "does_not_fit", "reference_not_repeatable")]
            v.reasons.insert(0, cand.over_memory)
            v.flag("host_memory")

    def _oom_killer_acted(self) -> bool:
        """Did the host's out-of-memory killer kill anything since this evaluation began? Where the kernel
        does not count (no ``oom_kill`` in /proc/vmstat), assume it did: the harness's benefit of doubt."""
        now = memory.oom_kills()
        return self.oom_kills is None or now is None or now > self.oom_kills

    def _confinement_holds(self) -> bool:
        """Ask the confined candidate worker, before its candidate is imported, what it entered; the
        verdict records it. A guard that did not load is the harness's failure (probe() checks it)."""
        info = self._cand_step(lambda: self.cand.request({"op": "confinement"}, self.config.run_timeout_s))
        if info is None:
            return False
        if info.get("landlock") is not None:
            self.v.confinement["landlock"] = info["landlock"]
        guard = info.get("guard") or {"enforced": False, "why": "the worker loaded no process guard"}
        self.v.confinement["process_guard"] = guard
        if not guard.get("enforced"):
            self.v.fail(HARNESS_ERROR, f"the candidate's confinement is incomplete: {guard.get('why')}; "
                                       "the candidate was not run")
            self.v.flag("harness_exception")
            return False
        return True

    def _over_gpu(self) -> str | None:
        """Why the GPU may have been too small for this evaluation, when the memory it was expected to need
        (memory.gpu_need: a stated multiple of the task's input and output, for the reference's and the
        candidate's workers side by side) is more than the GPU gives: it was admitted alone all the same (the
        floor, memory.fit_problem, had passed, and many such tasks fit). A candidate's out-of-memory error
        there keeps its runtime_error, since only the candidate's own worker names the error, and is said to
        be likely the harness's layout (flag ``over_gpu_oom``). None when the need was within the GPU, or not
        known."""
        gm, need = self.gpu_memory, self.gpu_need
        if gm is None or not gm.total or need is None or need <= gm.total:
            return None
        return (f"the task likely does not fit on this GPU beside its reference: the evaluation was expected to "
                f"need {need / 2**30:.1f} GiB (memory.gpu_need) and the GPU gives {gm.total / 2**30:.1f} GiB; "
                "a larger GPU would tell")

    def _cand_step(self, call):
        try:
            return call()
        except WorkerError as e:
            r = e.reply
            phase = {"setup": "importing/constructing ModelNew", "trial": "running forward",
                     "prepare_timing": "warming up", "time": "timing", "recheck": "re-checking",
                     "profile": "profiling"}.get(r.get("phase"), r.get("phase"))
            self.v.fail(RUNTIME_ERROR, f"{r.get('error_type')} while {phase}: {r.get('message', '')[:500]}")
            over = self._over_gpu() if r.get("error_type") == "OutOfMemoryError" else None
            if over:  # said, not excused: the error's name is the candidate's word, and a null reward is a gain
                self.v.add_reason(over)
                self.v.flag("over_gpu_oom")
            elif r.get("error_type") == "OutOfMemoryError" and self.gpu_memory is not None:
                # the candidate's word (its own worker names the error): said, not excused
                shared = self.gpu_memory.others_bytes()
                if shared:
                    self.v.add_reason(f"other evaluations held {shared / 2**30:.1f} GiB of this GPU meanwhile")
                    self.v.flag("gpu_shared_oom")
            self.v.log = trim_traceback(r.get("error", "")) + _log_tail(self.cand)
        except WorkerTimeout as e:
            self.v.fail(TIMEOUT, f"{e} (a hang or an endless loop in a kernel?)")
            self.v.log = _log_tail(self.cand)
        except BadReply as e:
            self.v.reject(f"{e}: the harness only sends plain data, so its reply path was tampered with",
                          "bad_reply")
            self.v.log = e.log[-3000:]
        except WorkerOverMemory as e:
            self.v.fail(RUNTIME_ERROR, str(e))
            self.v.flag("host_memory")
            self.v.log = e.log[-3000:]
        except ReplyTooLong as e:
            self.v.fail(RUNTIME_ERROR, str(e))
            self.v.flag("reply_too_long")
            self.v.log = e.log[-3000:]
        except WorkerDied as e:
            if self.cand is not None and self.cand.setup_failed():
                # bubblewrap itself failed before the worker started (bwrap says so): the harness's trouble
                self.v.fail(HARNESS_ERROR, f"the candidate's confinement could not be set up: "
                                           f"{e.log.strip().splitlines()[0][:300]}")
                self.v.flag("harness_exception")
            elif killed_from_outside(self.cand) and self.cand.oom_score_raised:
                self.v.fail(RUNTIME_ERROR, f"{e}: a SIGKILL the harness did not send, after the candidate offered "
                                           f"itself to the out-of-memory killer: {self.cand.oom_score_raised}")
            elif killed_from_outside(self.cand) and self._oom_killer_acted():
                self.v.fail(HARNESS_ERROR, f"{e}: a SIGKILL the harness did not send, while the host's "
                                           "out-of-memory killer acted; not counted against the candidate")
                self.v.flag("worker_killed")
            elif killed_from_outside(self.cand):
                self.v.fail(RUNTIME_ERROR, f"{e}: a SIGKILL that neither the harness nor the out-of-memory killer "
                                           "sent (the host counted no OOM kill meanwhile): the candidate's doing")
            else:
                self.v.fail(RUNTIME_ERROR, f"{e} (a crash, e.g. a segfault, or sys.exit in the candidate)")
            self.v.log = e.log[-3000:]
        return None

    def _integrity_ok(self, reply: dict, when: str) -> bool:
        changed = reply.get("integrity") or []
        if changed and not self.config.calibrate:
            self.v.reject(f"the harness's own functions or settings were changed {when}: "
                          f"{', '.join(changed[:8])}", "monkey_patch")
            if any(k == "precision" for k in changed):
                self.v.flag("precision_downgrade")
            return False
        return True

    def _judge(self, trial: dict, key: str, label: str, after_timing: bool = False) -> bool:
        """One candidate trial: its integrity, the dynamic honesty checks, then the reference worker's
        comparison of the output it was shared (and its check that the shared inputs are unchanged)."""
        v, cfg = self.v, self.config
        if not self._integrity_ok(trial, "during forward"):
            return False
        if trial["violations"] and cfg.rules != KERNELBENCH:  # kernelbench: torch ops may run in forward
            v.reject(f"{label}: forward ran torch operators that compute: {', '.join(trial['violations'][:8])}; "
                     "only allocation, views and the candidate's own kernels are allowed", "torch_compute")
            return False
        if trial["flags"]:
            for f in trial["flags"]:
                v.reject(f"{label}: {f}", f.split(":")[0])
            return False
        r = self._ref_gpu({"op": "judge", "key": key, "output": trial["output"], "precision": cfg.precision})
        if r is None:
            return False
        if "unreadable" in r:
            v.fail(RUNTIME_ERROR, f"{label}: the output the candidate's worker shared could not be read: {r['unreadable']}")
            return False
        if r["input_mutated"]:
            v.reject(f"{label}: input_mutated: the shared input set no longer holds the values drawn for it",
                     "input_mutated")
            return False
        if r.get("reference_unstable"):  # the reference's own worker found it: no candidate can match it
            v.fail(HARNESS_ERROR, f"{label}: the reference does not repeat itself on the same inputs (a random "
                                  f"draw in its forward, e.g. dropout in training mode): {r['reference_unstable']}; "
                                  "no candidate can be judged against it")
            v.flag("reference_not_repeatable")
            return False
        c = Comparison(**r["comparison"])
        v.num_trials += 1
        v.rel_err = max(v.rel_err or 0.0, c.rel_err)
        v.max_abs_err = max(v.max_abs_err or 0.0, c.max_abs_err)
        v.tolerance = c.tolerance or v.tolerance
        v.allclose_1e2 = (v.allclose_1e2 if v.allclose_1e2 is not None else True) and c.allclose_1e2
        if c.problem:
            v.fail(INCORRECT, f"{label}: {c.problem}")
            return False
        if not c.ok:
            if is_precision_downgrade(c, cfg.precision):
                v.reject(f"{label}: error {c.rel_err:.2e} is at TF32/half-precision level, above the strict "
                         f"fp32 tolerance {c.tolerance:.0e}; the baseline runs in strict fp32 "
                         "(use --precision tf32 to compare TF32 kernels against TF32 baselines)",
                         "precision_downgrade")
            else:
                v.fail(INCORRECT, f"{label}: {c.worst}")
                if after_timing:
                    v.flag("output_cache")
                    v.add_reason("outputs were right before timing and wrong after new values were written "
                                 "into the same buffers: results are being cached across calls")
            return False
        v.verdict = CORRECT
        return True

    def _warm_compile(self, module) -> bool:
        """Compile the reference with torch.compile before the GPU phase, when the baseline will be needed
        (compilation is CPU work and can take a minute). Its first run draws inputs and runs kernels on
        the GPU, so it holds the GPU lock shared: on a GPU that evaluations share (bench --per-gpu 2), it
        once ran beside another evaluation's exclusive timing and made its eager baseline up to 2x slow."""
        v, cfg = self.v, self.config
        self.cached_baseline = (self.store.get(self.task.sha256, v.gpu, v.torch_version, cfg.precision)
                                if cfg.use_baseline_cache else None)
        self.compile_error = None
        if self.cached_baseline is None and cfg.use_baseline_cache:
            # another evaluation of this task may be computing it: wait for it, then read it
            self.baseline_claim = self.store.claim(self.task.sha256, v.gpu, v.torch_version, cfg.precision)
            self.cached_baseline = self.store.get(self.task.sha256, v.gpu, v.torch_version, cfg.precision)
            if self.cached_baseline is not None:  # the evaluation that held the claim stored it: let others read
                self.baseline_claim.close()
                self.baseline_claim = None
        if self.cached_baseline is None:
            with self.lock.shared(busy=False):
                try:
                    r = self.ref.request({"op": "compile", "seed": self.seed}, cfg.baseline_timeout_s)
                    v.timing["compile_s"] = round(r["compile_s"], 2)
                except (WorkerError, WorkerDied, WorkerTimeout) as e:
                    self.compile_error = (e.reply.get("message") if isinstance(e, WorkerError) else str(e))[:500]
                    # the reference worker is gone with it: start a fresh one for the eager baseline, whose
                    # weights the candidate then loads (the old worker's shared ones went with it)
                    self.ref.cleanup()
                    self.ref = WorkerProcess(env=self.ref_env, label="reference")
                    info = self._ref_step(lambda: self.ref.request(self.ref_setup, cfg.baseline_timeout_s))
                    if info is None:
                        return False
                    self.ref_state_dict = info["state_dict"]
        return True

    def _rotation_seeds(self, set_bytes: int) -> list[int]:
        """The seeds of the timing loop's input sets (the same for the baselines and the candidate)."""
        cfg = self.config
        n_rot = trial_inputs.rotation_sets(set_bytes, cfg.rotate_bytes, cfg.num_recheck)
        return [self.seed + 1000 + i for i in range(n_rot)]

    def _baselines_first(self, ref_info: dict) -> bool:
        """The copy bandwidth and the eager and compile baselines, where not cached, timed before the
        candidate's worker has loaded any of its code (see run()), under the exclusive lock. The reference
        times on its own ring of the sets the candidate will be timed on (the same seeds; one set when the
        task's size is unknown), shared with no one and freed before the trials."""
        cfg = self.config
        if self.cached_baseline is not None and self._bandwidth(measure=False):
            return self._baselines()  # both read from the cache: no lock to wait for
        # quiet: no other evaluation's candidate code (nor an agent's command) runs on this GPU while what is
        # cached for every later evaluation is measured; the GPU lock alone keeps out only harness requests
        try:
            with self.lock.quiet(cfg.quiet_wait_s) as self.quiet, self.lock.exclusive():
                if not self.quiet:  # measured all the same, for this verdict only
                    what = "the copy bandwidth was" if self.cached_baseline is not None else "the baselines were"
                    self.v.add_reason(f"other evaluations' candidate code was still running on this GPU after "
                                      f"{cfg.quiet_wait_s:.0f} s (quiet_wait_s): {what} measured beside it"
                                      + (" and not cached" if cfg.use_baseline_cache else ""))
                if not self._bandwidth():
                    return False
                if self.cached_baseline is not None:
                    return self._baselines()
                size = ((ref_info.get("sizes") or {}).get("footprint") or {}).get("input_bytes")
                seeds = self._rotation_seeds(size) if size else [self.seed + 1000]  # size unknown: one set
                # the reference's own ring only: nothing is shared with the candidate (its code is not loaded yet)
                if self._ref_step(lambda: self.ref.request({"op": "rotation", "seeds": seeds, "share": False},
                                                           cfg.run_timeout_s)) is None:
                    return False
                if not self._baselines():
                    return False
        finally:
            for asked, start, end, quiet in self.lock.quiet_holds[-1:]:  # how long it waited for others' code
                self.v.timing["quiet"] = {"quiet": quiet, "waited_s": round(start - asked, 3),
                                          "held_s": round(end - start, 3), "window": [round(start, 4), round(end, 4)]}
        return self._ref_step(lambda: self.ref.request({"op": "drop", "keys": [], "ring": True},
                                                       cfg.run_timeout_s)) is not None

    def _baselines(self) -> bool:
        v, cfg = self.v, self.config
        store = self.store
        t0 = time.perf_counter()
        cached = self.cached_baseline
        if cached is not None:
            self.baseline, v.baseline_cached = cached, True
        else:
            # with the candidate's checksum work, so that the harness overhead seen by the evaluator's
            # clock (overhead_ms) includes it exactly as it does for the candidate
            eager = self._time(self.ref, None, "model", self._ref_step, {"checksum_seed": self.checksum_seed})
            if eager is None:
                return False
            compiled, compile_error = None, self.compile_error
            if compile_error is None:
                try:
                    compiled = self._time(self.ref, None, "compile", None)
                except (WorkerError, WorkerDied, WorkerTimeout) as e:
                    compile_error = (e.reply.get("message") if isinstance(e, WorkerError) else str(e))[:500]
            if compile_error:
                v.add_reason(f"torch.compile baseline unavailable: {compile_error}")
            self.baseline = Baseline(self.task.sha256, v.gpu, v.torch_version, cfg.precision, eager.ms,
                                     compiled.ms if compiled else None,
                                     eager.evaluator_ms_per_iter - eager.ms, compile_error,
                                     {"eager_iters": eager.n, "compile_iters": compiled.n if compiled else 0,
                                      "eager_warmup": eager.reply.get("warmup"),
                                      "gap_ms": eager.gap_ms,
                                      "eager_issue_ms": eager.reply.get("issue_median_ms")})
            if cfg.use_baseline_cache and self.quiet:  # not quiet: for this verdict only
                store.put(self.baseline)
            if self.baseline_claim is not None:
                self.baseline_claim.close()  # waiting evaluations of this task read it now (or time their own)
                self.baseline_claim = None
        v.eager_ms, v.compile_ms = self.baseline.eager_ms, self.baseline.compile_ms
        v.baseline_s = round(time.perf_counter() - t0, 4)
        return True

    def _bandwidth(self, measure: bool = True) -> bool:
        """The copy bandwidth of this GPU for the roofline bound: cached per GPU x torch like the
        baselines, else measured by the reference worker (under the exclusive lock, like any timing).
        ``measure=False``: only what needs no measuring; False then says a measurement is due."""
        v, cfg = self.v, self.config
        if rehearsal():  # a CPU's copy says nothing about a GPU
            return True
        cached = self.store.get_bandwidth(v.gpu, v.torch_version) if cfg.use_baseline_cache else None
        if cached is not None:
            self.measured_gbs = cached
            return True
        if not measure:
            return False
        r = self._ref_step(lambda: self.ref.request({"op": "bandwidth"}, cfg.run_timeout_s))
        if r is None:
            return False
        if "unavailable" in r:
            v.timing["bandwidth"] = r
            return True
        self.measured_gbs = r["gbs"]
        v.timing["bandwidth"] = r
        if cfg.use_baseline_cache and self.quiet:
            self.store.put_bandwidth(v.gpu, v.torch_version, r["gbs"], r)
        return True

    def _roofline(self) -> None:
        """The verdict's roofline block: the task's minimal bytes and FLOPs, the bound they imply on this
        GPU, and the fraction of it the candidate (when correct), eager and compile reach."""
        v = self.v
        if self.set_bytes is None or v.gpu is None:  # no reference trial ran: nothing to bound
            return
        r = roofline.assess(gpu_name=v.gpu, precision=self.config.precision,
                            work=roofline.Work.from_dict(self.work) if self.work else None,
                            input_bytes=self.set_bytes, param_bytes=self.param_bytes,
                            output_bytes=sum(self.out_bytes or []), measured_gbs=self.measured_gbs,
                            ms=v.ms if v.ok else None, eager_ms=v.eager_ms, compile_ms=v.compile_ms)
        v.roofline = r.to_dict()
        for flag in r.flags:
            v.flag(flag)
        if r.warning:
            v.add_reason(f"roofline: {r.warning}")

    def _time(self, worker: WorkerProcess, rotation: list | None, target: str, wrap,
              extra: dict | None = None, first_step: int = 0) -> _Timed | None:
        """Time ``target`` in ``worker``: the reference on its own ring, the candidate on the shared
        ``rotation`` sets (copied into its own buffers), its ring's refreshes counted from ``first_step``."""
        cfg = self.config

        def go() -> _Timed:
            prep = worker.request({"op": "prepare_timing", "inputs": rotation, "target": target,
                            "warmup_ms": cfg.warmup_ms, "rep_ms": cfg.rep_ms, "min_iters": cfg.min_iters,
                            "max_iters": cfg.max_iters, "max_window_ms": cfg.max_window_ms,
                            "first_step": first_step},
                           cfg.baseline_timeout_s if worker is self.ref else cfg.run_timeout_s)
            t0, start = time.perf_counter(), time.time()
            r = worker.request({"op": "time", **(extra or {})}, cfg.run_timeout_s)
            if worker is self.cand and not _timing_figures_ok(r):
                raise BadReply("the candidate's worker sent timing figures that are not finite numbers",
                               _log_tail(worker))
            outer = (time.perf_counter() - t0) * 1e3 / r["n"]
            # when, on the epoch clock, this GPU was being timed: windows of evaluations on one GPU
            # must never overlap (benchmarks/bench_multi_gpu.py checks it across a whole run)
            self.v.timing.setdefault("timed_windows", []).append((round(start, 4), round(time.time(), 4)))
            r["warmup"] = prep.get("warmup")
            # the honest overhead of a call this long, on the curve the worker measured before any candidate code;
            # the candidate's at most GAP_SLACK_MS over the reference's trivial call (its curve is its own word)
            gap = timing.gap_at(r.get("gap_curve"), r["gpu_median_ms"],
                                cap=self.ref_gap_ms + timing.GAP_SLACK_MS if worker is self.cand else None)
            return _Timed(r["gpu_median_ms"], r["gpu_median_ms"], r["wall_median_ms"], outer, r["n"], gap, r)

        return wrap(go) if wrap else go()

    def _time_candidate(self, rotation: list) -> _Timed | None:
        v = self.v
        # checksums in every mode, compared only when strict: the timing loop is the same either way
        t = self._candidate_attempt(rotation)
        if t is None:
            return None
        # Clock 2: the evaluator's own clock around the whole timing request, less the harness's own
        # per-call cost (L2 flush, input rotation, checksums) measured on the reference.
        overhead = self.baseline.overhead_ms
        excess = self._outer_excess(t, overhead)
        if excess > self._allowed(t):
            # Host load moves the harness's cost (on the H200 with 8 evaluations at once: 0.73 ms per call
            # when the baseline was cached, 1.08 ms later). Measure it again now, on the trusted reference
            # in the same lock window, before distrusting the candidate's worker.
            control = self._time(self.ref, None, "model", self._ref_step, {"checksum_seed": self.checksum_seed})
            if control is None:
                return None
            overhead_now = control.evaluator_ms_per_iter - control.ms
            v.timing["control_overhead_ms"] = round(overhead_now, 4)
            if overhead_now > 2 * overhead + 0.2:
                # load on the host (which a candidate could cause itself, to hide time from this clock):
                # accepted, but said, so that a reader knows the evaluator's clock was loosened
                v.flag("host_load")
                v.add_reason(f"the host was loaded while timing: the harness's own cost per call rose from "
                             f"{overhead:.3f} to {overhead_now:.3f} ms; the evaluator's clock check allowed for it")
            overhead = max(overhead, overhead_now)
            excess = self._outer_excess(t, overhead)
        if excess > self._allowed(t):
            # Load on a shared host comes and goes (parallel evaluations, builds); work hidden from the
            # worker's clocks does not. Time the candidate once more and keep the attempt the evaluator's
            # clock agrees with best: a candidate that hides work must hide it in both. The attempt set
            # aside still has its timed outputs checked (_timed_outputs_ok).
            # Its ring goes on from where the first attempt's stopped: inputs of values no call has seen,
            # else a cache keyed on content would hit on every input the first attempt timed.
            again = self._candidate_attempt(rotation, first_step=t.reply["start_step"] + t.n)
            if again is None:
                return None
            excess_again = self._outer_excess(again, overhead)
            v.timing["retimed"] = {"first_evaluator_ms_per_iter": round(t.evaluator_ms_per_iter, 4),
                                   "first_excess_ms": round(excess, 4), "excess_ms": round(excess_again, 4),
                                   "attempt_iters": [t.n, again.n]}
            if excess_again < excess:
                again.earlier, t, excess = t.earlier + [t.reply], again, excess_again
            else:
                t.earlier.append(again.reply)
        # Clock 1 (of the attempt kept): inside the worker, host wall time (device-wide sync) vs CUDA events,
        # less the honest overhead of a call this long (its curve measured before the candidate was imported)
        gap = t.gap_ms
        inner_excess = t.wall_median_ms - t.gpu_median_ms - gap
        if inner_excess > max(0.03, 0.10 * t.gpu_median_ms):
            v.flag("timing_mismatch")
            v.add_reason(f"device-wide wall time exceeds the event time by {inner_excess:.3f} ms per call: work "
                         "outside the timed stream (side streams or threads); the wall-clock figure is used")
        if excess > self._allowed(t):
            v.flag("timer_mismatch")
            v.add_reason(f"the evaluator's clock saw {excess:.3f} ms per call more than the worker reported: "
                         "the worker's timing is not trusted; the evaluator's figure is used")
            t.ms = max(t.ms, t.evaluator_ms_per_iter - overhead)
        v.ms = round(t.ms, 6)
        v.timing.update({"iters": t.n, "gpu_median_ms": t.gpu_median_ms, "wall_median_ms": t.wall_median_ms,
                         "evaluator_ms_per_iter": t.evaluator_ms_per_iter, "gap_ms": gap,
                         "gap_curve": timing.valid_curve(t.reply.get("gap_curve")),
                         "harness_overhead_ms": overhead, "rotation_sets": len(rotation),
                         "warmup": t.reply.get("warmup")})
        # how much of each side's GPU time the host spent issuing it (timing.HOST_BOUND): informative only, the
        # candidate's own figure comes from its worker; eager's from a baseline cached before this was recorded
        # is unknown (None)
        details = self.baseline.details if isinstance(self.baseline.details, dict) else {}  # (an imported set's)
        eager_issue = details.get("eager_issue_ms")
        v.timing["host_bound"] = {"candidate": timing.host_bound_share(t.reply.get("issue_median_ms"), t.gpu_median_ms),
                                  "eager": timing.host_bound_share(eager_issue, self.baseline.eager_ms),
                                  "threshold": timing.HOST_BOUND}
        return t

    def _candidate_attempt(self, rotation: list, first_step: int = 0) -> _Timed | None:
        """One timing request to the candidate's worker, its integrity checked, ``ms`` raised to the
        worker's own wall clock (less the harness's gap) where that exceeds the events. Its ring's
        refreshes start after ``first_step``; a reply whose timed calls claim an earlier step (inputs an
        earlier attempt saw, whose outputs the candidate could have kept) is tampering."""
        t = self._time(self.cand, rotation, "model", self._cand_step, {"checksum_seed": self.checksum_seed},
                       first_step=first_step)
        if t is None or not self._integrity_ok(t.reply, "during timing"):
            return None
        start = t.reply.get("start_step")
        # the warm-up makes at most max_iters calls and one window more (timing.plan_iterations)
        latest = first_step + 4 * self.config.max_iters + 1000
        if not isinstance(start, int) or isinstance(start, bool) or not first_step <= start <= latest:
            self.v.reject(f"the timing reply's first timed step ({start!r}) lies outside the steps this attempt "
                          f"could have reached ({first_step} to {latest}): the harness's reply was tampered with",
                          "bad_reply")
            return None
        if t.wall_median_ms - t.gpu_median_ms - t.gap_ms > max(0.03, 0.10 * t.gpu_median_ms):
            t.ms = max(t.ms, t.wall_median_ms - t.gap_ms)
        return t

    @staticmethod
    def _outer_excess(t: _Timed, overhead: float) -> float:
        """Per call, what the evaluator's clock saw beyond the worker's figure and the harness's cost."""
        return t.evaluator_ms_per_iter - t.ms - overhead

    @staticmethod
    def _allowed(t: _Timed) -> float:
        return max(0.10, 0.25 * t.ms)

    def _checks_timed_outputs(self) -> bool:
        return self.config.strict and not self.config.calibrate

    def _timed_outputs_ok(self, timed: _Timed) -> bool:
        """Were the timed calls' outputs right? The reference recomputes each one's checksum on the
        same inputs; a candidate that is right when checked but not while timed fails here. Every
        timing attempt is checked, the one set aside (``_time_candidate``'s retry) too."""
        v, cfg = self.v, self.config
        checked = 0
        for reply in timed.earlier + [timed.reply]:
            cand, start = reply.get("checksums"), reply.get("start_step")
            if not isinstance(cand, list) or len(cand) != reply.get("n") or not isinstance(start, int):
                v.reject("the timing reply lacks the timed outputs' checksums: the harness's reply was tampered "
                         "with", "bad_reply")
                return False
            ref = self._ref_gpu({"op": "checksums", "start_step": start, "n": len(cand), "seed": self.checksum_seed},
                                cfg.baseline_timeout_s)
            if ref is None:
                return False
            bad = timed_output_mismatches(cand, ref["checksums"], v.tolerance or 1e-4)
            checked += len(cand)
            v.timing["timed_outputs_checked"] = checked
            if bad:
                v.fail(INCORRECT, f"{len(bad)} of {len(cand)} timed calls returned outputs that differ from the "
                                  f"reference on the same inputs (first: call {bad[0]}): right when checked, wrong "
                                  "while timed")
                v.flag("timed_outputs_wrong")
                return False
        return True

    def _census(self) -> bool:
        """Which CUDA kernels did the candidate launch? Torch's own are not allowed."""
        prof = self._cand_gpu({"op": "profile", "iters": 3})
        if prof is None:
            return False
        kernels = prof["kernels"]
        calls = traced_calls(prof)
        self.v.timing["profile"] = [{"name": k["name"][:120], "count": k["count"],
                                     "us_per_call": round(k["cuda_us"] / calls, 2)} for k in kernels[:10]]
        if not self.config.strict or self.config.calibrate:
            return True
        own = self._own_kernel_names()
        if self.config.rules == KERNELBENCH:
            return self._own_kernels_ran(kernels, own) and self._integrity_ok(prof, "while profiling")
        foreign = [k["name"] for k in kernels if not _allowed_kernel(k["name"], own)]
        if foreign:
            self.v.reject("forward launched kernels that are neither the candidate's nor cuBLAS/cuDNN: "
                          + "; ".join(n[:100] for n in foreign[:5]), "torch_compute")
            return False
        return self._integrity_ok(prof, "while profiling")

    def _own_kernels_ran(self, kernels: list[dict], own: set[str]) -> bool:
        """Under the kernelbench rules torch may compute in forward, but some of the work must be the
        candidate's own: at least one of its kernels must run."""
        if rehearsal():  # no CUDA kernels to take a census of on the CPU
            return True
        if any(re.search(rf"\b{re.escape(n)}\b", k["name"]) for k in kernels for n in own):
            return True
        self.v.reject("none of the solution's own kernels ran during forward "
                      f"({', '.join(sorted(own)[:5]) or 'it defines no __global__ kernel'}); under the kernelbench "
                      "rules torch may help, but a custom kernel must do part of the work", "no_custom_kernel")
        return False

    def _own_kernel_names(self) -> set[str]:
        names = set()
        for p in self.solution.source_files():
            text = p.read_text(errors="replace")
            text = re.sub(r"__launch_bounds__\s*\([^)]*\)", "", text)
            names.update(GLOBAL_FN.findall(text))
        return names

    def _speedups(self, t: _Timed) -> None:
        v = self.v
        if v.ms and v.eager_ms:
            v.speedup_vs_eager = round(v.eager_ms / v.ms, 4)
        if v.ms and v.compile_ms:
            v.speedup_vs_compile = round(v.compile_ms / v.ms, 4)

    def _scrutinize(self) -> None:
        """A very large speedup: say so, and re-check on more fresh signed inputs."""
        v, cfg = self.v, self.config
        v.flag("excessive_speedup")
        v.add_reason(f"speedup over eager {v.speedup_vs_eager:.1f}x exceeds {cfg.excessive_speedup:.0f}x: "
                     "re-checked on extra inputs")
        _ok, skipped = self._trials([(f"extra trial {i}", self.seed + 3000 + i,
                                      trial_inputs.SIGNED if i % 2 else trial_inputs.TASK, i > 0) for i in range(4)],
                                    required=False)
        if skipped:
            v.timing.setdefault("skipped_trials", []).extend(skipped)


def _allowed_kernel(name: str, own: set[str]) -> bool:
    if any(re.search(rf"\b{re.escape(n)}\b", name) for n in own):
        return True
    if TORCH_KERNELS.search(name) and not re.search(r"FillFunctor|direct_copy_kernel|copy_kernel", name):
        return False
    return bool(LIBRARY_KERNELS.search(name))


def timed_output_mismatches(cand: list, ref: list, tolerance: float) -> list[int]:
    """Indices of timed calls whose output checksums (dot with random +-1 weights, squared norm)
    disagree with the reference's beyond what the comparison tolerance allows. For outputs
    within the relative-L2 tolerance the dot products differ by about tolerance x norm (random
    signs), the norms by at most that; an output of other inputs differs by about the norm."""
    bad = []
    for i, (c, r) in enumerate(zip(cand, ref)):
        try:
            cd, cn, rd, rn = float(c[0]), float(c[1]), float(r[0]), float(r[1])
        except (TypeError, ValueError, IndexError):
            bad.append(i)
            continue
        if not all(math.isfinite(x) for x in (rd, rn)):  # the reference itself is not finite here
            same = all(math.isnan(a) and math.isnan(b) or a == b for a, b in ((cd, rd), (cn, rn)))
            if not same:
                bad.append(i)
            continue
        norm = math.sqrt(max(rn, 0.0))
        ok = (math.isfinite(cd) and math.isfinite(cn)
              and abs(cd - rd) <= 50 * tolerance * norm + 1e-12
              and abs(math.sqrt(max(cn, 0.0)) - norm) <= 10 * tolerance * norm + 1e-12)
        if not ok:
            bad.append(i)
    return bad


def traced_calls(profile_reply: dict) -> int:
    """How many calls a worker's profile reply traced (at most one per input set): untrusted, so at least 1."""
    n = profile_reply.get("iters")
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1


def restrain_candidate(worker: WorkerProcess, config: SandboxConfig, extra_mb: float = 0.0) -> None:
    """What the harness holds a worker that runs candidate code to: the longest reply it reads, and its
    host memory limit (``candidate_host_memory_gb``, plus ``extra_mb``)."""
    worker.max_reply_bytes = MAX_UNTRUSTED_REPLY
    if config.candidate_host_memory_gb:
        worker.limit_memory(config.candidate_host_memory_gb * 1024 + extra_mb)


def reference_setup(task: Task, config: SandboxConfig, seed: int, init_inputs: list) -> dict:
    return {"op": "setup", "role": "reference", "precision": config.precision, "seed": seed,
            "task_source": task.source, "task_origin": task.origin, "init_inputs": init_inputs,
            "gpu_bytes": gpu_memory_bytes(config.device)}


def candidate_setup(task: Task, solution: Solution, built: BuildResult, config: SandboxConfig, seed: int,
                    init_inputs: list, state_dict: dict, worker: WorkerProcess | None = None) -> dict:
    return {"op": "setup", "role": "candidate", "precision": config.precision, "seed": seed,
            "strict": config.strict, "calibrate": config.calibrate,
            "task_source": task.source, "task_origin": task.origin,
            "init_inputs": init_inputs, "state_dict": state_dict,
            "solution": stage_candidate(solution, built, worker)}


def stage_candidate(solution: Solution, built: BuildResult, worker: WorkerProcess | None) -> dict:
    """Where the candidate's worker finds the solution and its artifact. A confined worker is given copies
    in its own scratch (the files that were checked and hashed, the library, its own copy of a
    load_inline build), never the solution's directory or the build cache."""
    if worker is None or worker.scratch is None:
        return {"kind": solution.kind, "root": str(solution.root), "model_file": str(solution.model_file),
                "library": built.library, "python_module": built.python_module}
    scratch, inside = Path(worker.scratch), confine.INSIDE
    stage_solution(solution, scratch / "solution")
    library = None
    if built.library:
        (scratch / "artifact").mkdir(exist_ok=True)
        shutil.copyfile(built.library, scratch / "artifact" / Path(built.library).name)
        library = f"{inside}/artifact/{Path(built.library).name}"
    if built.extensions_dir:
        shutil.copytree(built.extensions_dir, scratch / "torch_extensions", symlinks=True, dirs_exist_ok=True)
    return {"kind": solution.kind, "root": f"{inside}/solution",
            "model_file": f"{inside}/solution/{solution.display(solution.model_file)}",
            "library": library, "python_module": built.python_module}


def killed_from_outside(worker: WorkerProcess | None) -> bool:
    """Did ``worker`` die of a SIGKILL that the harness did not send (the OOM killer, an operator)?
    A candidate can SIGKILL itself too: that earns a null reward, never a positive one (docs/sandbox.md)."""
    if worker is None or worker.killed_by_harness:
        return False
    try:
        code = worker.exit_code(timeout=5)
    except Exception:  # noqa: BLE001 - still running: it did not die of a signal
        return False
    return code == -signal.SIGKILL


def _real(x) -> bool:
    """A number as the harness sends one: an int or float (not a bool), finite, of a sane size."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and abs(x) < 1e12 and math.isfinite(x)


def _timing_figures_ok(r: dict) -> bool:
    """A timing reply's figures are what the harness sends: finite real medians and a positive call count."""
    n = r.get("n")
    return (_real(r.get("gpu_median_ms")) and _real(r.get("wall_median_ms")) and isinstance(n, int)
            and not isinstance(n, bool) and 0 < n < 10**9)


def _log_tail(worker: WorkerProcess | None, n: int = 1500) -> str:
    if worker is None:
        return ""
    text = worker.read_log().strip()
    return ("\n--- worker output ---\n" + text[-n:]) if text else ""


__all__ = ["evaluate", "NoGpuError"]
