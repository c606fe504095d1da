"""The GPU worker process: ``python -m cuda_agent.sandbox.worker FD``.

One worker plays one role for one evaluation, then exits:

* ``reference``: runs the task's own ``Model`` (trusted). It draws every input set on the GPU from
  the evaluator's seeds, shares a copy of each with the candidate's worker (CUDA IPC, from a memory
  pool of its own: see share.py), keeps the reference outputs, and judges the candidate's outputs
  on the GPU when they are shared back. Also eager and ``torch.compile`` timings.
* ``candidate``: runs ``ModelNew`` (untrusted). The harness's timers, synchronization and
  guards are imported and referenced *before* the candidate is, and checked for tampering
  after every phase. The candidate never sees reference outputs; its outputs go to the reference
  worker, which compares them in another process. Only scalars and small reports reach the evaluator.

Messages from the evaluator are pickles (the evaluator is trusted). Replies are written with
``torch.save`` and read back with ``torch.load(weights_only=True)``, so a compromised worker
cannot run code in the evaluator by crafting its reply.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os

_PARENT = os.getppid()  # read before the slow imports below: the parent may die during them
import pickle
import sys
import time
import traceback


def _since_start() -> float | None:
    """Seconds since this process started (its start time in /proc), None where that cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(uptime - ticks / os.sysconf("SC_CLK_TCK"), 3)


_BOOT = {"python_s": _since_start()}
"""Where a worker's start goes: seconds from its process start to these points (diagnostics, timing.workers)."""
import torch

_BOOT["torch_s"] = _since_start()
import torch.profiler  # noqa: F401 - the census's, imported before any candidate code (guards.settle_harness)

from . import confine, guards, memory, roofline, share, timing
from .compare import compare
from .gpu import rehearsal
from .inputs import TASK, draw, leaf_sizes, nbytes
from .guards import TorchOpGuard, bitwise_equal, integrity_diff, integrity_snapshot, overlaps, storages
from .timing import InputRing, L2Flusher, leaves

_BOOT["harness_s"] = _since_start()

_save = torch.save
_START_CWD = os.getcwd()
_LANDLOCK: dict | None = None
"""What Landlock domain a confined worker entered (confine.enter_landlock), for the verdict."""
_GUARD: dict | None = None
"""The process guard a confined worker loaded (confine.enter_process_guard), for the verdict."""
_REHEARSAL = rehearsal()  # tests only: the CPU stands in for the GPU (gpu.REHEARSAL_ENV)
_sync = timing._no_sync if _REHEARSAL else torch.cuda.synchronize
_COMPILE_BACKEND = "eager" if _REHEARSAL else "inductor"
_thread_starts = guards.count_thread_starts()
_perf = time.perf_counter
_WARM: dict = {}
"""A worker started with ``--warm`` (process.prestart): its CUDA context is being made by a thread of its
own while it waits for its first request; ``op_setup`` waits for that thread before it touches CUDA."""


def _warm_cuda() -> None:
    """Make the CUDA context now, on another thread (the primary context is the whole process's)."""
    import threading

    def make() -> None:
        t0 = _perf()
        try:
            torch.cuda.synchronize(0)  # initializes CUDA and creates device 0's primary context
        except Exception as e:  # noqa: BLE001 - op_setup makes it again, and reports any failure then
            _WARM["error"] = f"{type(e).__name__}: {e}"[:300]
        _WARM["s"] = round(_perf() - t0, 3)

    _WARM["thread"] = threading.Thread(target=make, name="cuda-agent-warm", daemon=True)
    _WARM["thread"].start()


def set_precision(mode: str) -> None:
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def precision_state() -> dict:
    return {"matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision()}


def _load_module(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Worker:
    def __init__(self, conn):
        self.conn = conn
        self._send_bytes = conn.send_bytes
        self.device = torch.device("cpu") if _REHEARSAL else torch.device("cuda", 0)
        self.role = None
        self.model = None
        self.compiled = None
        self.timing_state = None
        self.snapshot = None
        self.prev_outputs = None
        self.gap_curve = None
        self.flush = None
        self.task_module = None
        self.exporter: share.Exporter | None = None  # reference: the input sets it shares
        self.importer = share.Importer()  # candidate: the input sets it was given
        self.refs: dict[str, object] = {}  # reference: key -> its output for that set, until judged
        self.drawn: dict[str, tuple] = {}  # reference: shared set key -> (seed, kind), to re-draw and compare
        self.ring = None  # reference: its own rotation ring (eager, compile, timed-output checksums)
        self.repeatable: bool | None = None  # reference: does get_inputs() repeat itself (the re-draw check)?
        self.pending: list = []  # candidate: outputs shared with the reference, alive until the next request
        self.count_on_trial = False  # reference: FLOPs not countable on the meta device: count the first trial
        self.started: dict = {}  # when it was ready to serve, and how long its first request kept it waiting
        self._share_at: tuple | None = None  # (peak RSS, when, others_share_mb) at the last smaps_rollup read

    # -- plumbing
    def send(self, obj) -> None:
        buf = io.BytesIO()
        _save(obj, buf)
        self._send_bytes(buf.getvalue())

    def serve(self) -> None:
        # process start to ready: interpreter, torch, the harness (and where the time went, in _BOOT)
        self.started = {"boot_s": _since_start(), **_BOOT}
        t_ready = _perf()
        while True:
            try:
                msg = pickle.loads(self.conn.recv_bytes())
            except EOFError:
                return
            if t_ready is not None:
                self.started["waited_s"] = round(_perf() - t_ready, 3)  # ready, before its first request came
                t_ready = None
            op = msg["op"]
            if op == "exit":
                self.send({"ok": True})
                return
            try:
                reply = getattr(self, f"op_{op}")(msg)
            except BaseException as e:  # noqa: BLE001 - every failure is reported as data
                self.send({"error": traceback.format_exc(), "error_type": type(e).__name__,
                           "message": str(e)[:2000], "phase": op})
                return  # the context may be poisoned: never reuse this process
            if isinstance(reply, dict):
                peak_rss = memory.peak_rss_mb()
                reply["memory"] = {"peak_rss_mb": peak_rss, "peak_gpu_mb": memory.peak_gpu_mb(self.device),
                                   "others_share_mb": self._others_share(peak_rss)}
            self.send(reply)

    def _others_share(self, peak_rss: float | None) -> float | None:
        """memory.others_share_mb (~5 ms to read), read again only when the peak RSS has grown by more than
        16 MiB or half a second has passed since the last read (it moves as the evaluation's processes map
        the same libraries, and falls as they exit: a diagnostic, at most half a second stale)."""
        last, now = self._share_at, _perf()
        if last is None or peak_rss is None or peak_rss > last[0] + 16 or now > last[1] + 0.5:
            self._share_at = (peak_rss or 0.0, now, memory.others_share_mb())
        return self._share_at[2]

    def _integrity(self) -> list[str]:
        if self.snapshot is None:
            return []
        return integrity_diff(self.snapshot, integrity_snapshot((guards, timing, share, sys.modules[__name__])))

    # -- ops
    def op_confinement(self, msg: dict) -> dict:
        """What a confined worker entered in main(). Asked before the candidate is imported: nothing
        untrusted has run in this process yet, so the answer can be believed."""
        return {"landlock": _LANDLOCK, "guard": _GUARD}

    def op_setup(self, msg: dict) -> dict:
        steps: dict[str, float] = {}  # where the setup's time goes (verdict.timing["workers"])
        t = _perf()

        def step(name: str) -> None:
            nonlocal t
            now = _perf()
            steps[name] = round(now - t, 3)
            t = now

        self.role = msg["role"]
        self.strict = msg.get("strict", True) and self.role == "candidate" and not msg.get("calibrate")
        set_precision(msg["precision"])
        if _WARM:
            _WARM["thread"].join()
            step("warm_wait")
        if not _REHEARSAL:
            torch.cuda.set_device(self.device)
        torch.empty(1, device=self.device)
        step("cuda")
        self.flush = L2Flusher(self.device)
        # before any candidate code is imported; the lengths only where clock 1 reads them, the candidate's
        # (its setup holds the GPU lock shared: spin kernels of up to 3 ms must not run beside another's timing)
        self.gap_curve = timing.gap_curve(self.device, self.flush,
                                          ladder=timing.GAP_LADDER_MS if self.role == "candidate" else ())
        step("gap")
        info = {"gap_curve": self.gap_curve, "precision": precision_state(),
                "gpu": "CPU (rehearsal: timings mean nothing)" if _REHEARSAL else str(torch.cuda.get_device_name(self.device)),
                "torch": str(torch.__version__),
                "started": {**self.started, "warm_s": _WARM.get("s"), "warm_error": _WARM.get("error"), "steps_s": steps}}
        if self.role == "reference" or msg.get("calibrate"):
            task = _exec_task(msg["task_source"], msg["task_origin"])
            step("task")
            if self.role == "reference":
                self.task_module, self.exporter = task, share.Exporter(self.device)
                # the task's sizes from the meta device, before anything of it is made on the GPU (here, not in
                # the evaluator: the task's forward runs, and a forward that exits or hangs must take only this
                # process with it; its first run imports dynamo, which a spare has preloaded while idle), or as
                # an earlier evaluation of the same task read them (msg["sizes"], from the baseline cache)
                known = msg.get("sizes")
                try:
                    fp = memory.Footprint(**known["footprint"]) if known else None
                    work = roofline.Work.from_dict(known["work"]).to_dict() if known else None
                except (TypeError, KeyError):  # a cached form this harness does not read: the meta device again
                    known = fp = work = None
                fp = fp or memory.task_footprint(task, msg["init_inputs"])
                info["footprint"] = {**fp.to_dict(), **({"cached": True} if known else {})}
                info["does_not_fit"] = memory.fit_problem(fp, msg.get("gpu_bytes"))
                step("footprint")
                if info["does_not_fit"]:
                    return info
                info["work"] = work if known else roofline.count_work(task, msg["init_inputs"]).to_dict()
                info["sizes"] = {"footprint": dataclasses.asdict(fp), "work": info["work"]}
                self.count_on_trial = info["work"]["error"] is not None
                step("flops")
            self.model = _construct(task.Model, msg["init_inputs"], msg["seed"], self.device)
            step("model")
            if self.role == "reference":  # the weights travel to the candidate on the GPU, as the inputs do
                weights = self.model.state_dict()
                info["param_bytes"] = nbytes(list(weights.values()))
                info["state_dict"] = dict(zip(weights, self.exporter.share(share.WEIGHTS, list(weights.values()))))
            else:
                self.model.load_state_dict(_opened(msg["state_dict"]))
            step("weights")
            return info
        # candidate: snapshot the harness first, then import the candidate
        guards.settle_harness(self.device)
        self.snapshot = integrity_snapshot((guards, timing, share, sys.modules[__name__]))
        step("harness")
        sol = msg["solution"]
        if _GUARD is not None and not _GUARD["enforced"]:  # the evaluator asked first (op_confinement)
            raise RuntimeError(f"confinement incomplete, the candidate is not imported: {_GUARD['why']}")
        # the solution's directory is the working directory and first on the path (a spare worker
        # started elsewhere: what the caller's directory holds is not the candidate's to import)
        os.chdir(sol["root"])
        sys.path[:] = [p for p in sys.path if p not in ("", _START_CWD)]
        sys.path.insert(0, sol["root"])
        if sol.get("library"):
            if sol.get("python_module"):
                _load_module("cuda_ext", sol["library"])
            else:
                torch.ops.load_library(sol["library"])
                sys.modules["cuda_ext"] = torch.ops.cuda_ext
        module = _load_module("model_new", sol["model_file"])
        step("import")
        cls = getattr(module, "ModelNew", None)
        if cls is None:
            raise RuntimeError(f"{os.path.basename(sol['model_file'])} defines no ModelNew")
        torch.manual_seed(msg["seed"])
        model = cls(*msg["init_inputs"])  # on the CPU, then moved, as KernelBench does
        if not isinstance(model, torch.nn.Module):
            raise TypeError("ModelNew must be a torch.nn.Module")
        try:
            model.load_state_dict(_opened(msg["state_dict"]))
        except RuntimeError as e:
            raise RuntimeError("ModelNew must accept load_state_dict(Model(...).state_dict()): "
                               + str(e).split("\n\t", 1)[-1][:1500]) from None
        self.model = model.to(self.device)
        step("model")
        prepare = getattr(self.model, "prepare", None)
        if callable(prepare):
            with torch.no_grad():
                prepare()
            _sync()
            step("prepare")
        info["has_prepare"] = callable(prepare)
        info["integrity"] = self._integrity()
        return info

    def _call(self, inputs: list, guarded: bool) -> tuple[object, list[str]]:
        guard = TorchOpGuard() if guarded else contextlib.nullcontext()
        with torch.no_grad(), guard:
            out = self.model(*inputs)
        _sync()
        return out, (guard.violations if guarded else [])

    def _checked_trial(self, bufs: list, out_bytes: list[int]) -> dict:
        candidate = self.role == "candidate"
        clones = [b.clone() if isinstance(b, torch.Tensor) else b for b in bufs]
        if candidate and self.strict:
            guards.poison_allocator(self.device, out_bytes)
        threads_before = _thread_starts()
        out, violations = self._call(bufs, guarded=candidate and self.strict)
        flags = []
        if candidate:
            for leaf in leaves(out):
                if isinstance(leaf, torch.Tensor):
                    if type(leaf) is not torch.Tensor:
                        flags.append(f"lazy_output: output is a {type(leaf).__qualname__}, not a plain torch.Tensor")
                    elif leaf.device.type != self.device.type:
                        flags.append("output_not_on_gpu: an output tensor lives on the CPU")
            if overlaps(storages(out), storages(bufs)):
                flags.append("output_aliases_input: an output shares memory with an input")
            if self.prev_outputs is not None and overlaps(storages(out), storages(self.prev_outputs)):
                flags.append("output_reused: an output shares memory with the previous call's output, "
                             "which the caller still holds")
            if any(isinstance(b, torch.Tensor) and not bitwise_equal(b, c) for b, c in zip(bufs, clones)):
                flags.append("input_mutated: forward changed an input tensor")
            if _thread_starts() > threads_before:
                flags.append("threads: forward started a thread")
        self.prev_outputs = out
        self.pending.append(out)  # shared with the reference: alive until it has judged them
        # a flagged output is rejected unseen (and an input returned as output could not be re-shared)
        shared = {"value": "<not shared: flagged>"} if flags else share.export_tree(out, keep=self.pending)
        return {"output": shared, "violations": violations, "flags": flags}

    # -- reference: inputs drawn here, shared, judged here
    def op_ref_trial(self, msg: dict) -> dict:
        """Draw a set on the GPU from the evaluator's seed, share a copy under ``key`` (into the buffers
        of the previous set under that key when ``reuse``), and run the reference on the private draw.
        A task that rejects some inputs (signed ones, say) gets ``skipped`` instead."""
        key, seed, kind = msg["key"], msg["seed"], msg.get("kind", TASK)
        values = draw(self.task_module, seed, kind, self.device)
        if self.repeatable is None:  # the re-draw check needs get_inputs() to repeat itself bit for bit
            self.repeatable = _same_values(values, draw(self.task_module, seed, kind, self.device))
        descriptors = self.exporter.share(key, values, reuse=msg.get("reuse", False))
        self.drawn[key] = (seed, kind)
        counter = roofline.WorkCounter() if self.count_on_trial else contextlib.nullcontext()
        try:
            with counter:
                out, _ = self._call(values, guarded=False)
        except Exception as e:
            if _is_cuda_fault(e):
                raise
            return {"skipped": f"{type(e).__name__}: {str(e)[:500]}"}  # not "error": that ends the worker
        self.refs[key] = out
        reply = {"inputs": descriptors, "out_bytes": leaf_sizes(out), "in_bytes": nbytes(values)}
        if self.count_on_trial:  # counted on this real run instead of the meta device
            self.count_on_trial = False
            params = dict(self.model.state_dict())
            reply["work"] = counter.work(roofline.compute_dtype(values, params), "reference run").to_dict()
        return reply

    def op_judge(self, msg: dict) -> dict:
        """The candidate's output for set ``key`` (its memory, shared with this process) against the
        reference's, on the GPU; and whether the shared set still holds what was drawn."""
        ref = self.refs.pop(msg["key"])
        try:  # what the candidate's worker sent: a failure to read it is the candidate's, not the harness's
            out = share.open_tree(msg["output"])
            c = compare(out, ref, msg["precision"])
        except Exception as e:
            if _is_cuda_fault(e) or isinstance(e, torch.OutOfMemoryError):  # the judge's own trouble
                raise
            return {"unreadable": f"{type(e).__name__}: {str(e)[:300]}"}
        del out
        unstable = None if c.ok and not c.problem else self._reference_unstable(msg["key"], ref, msg["precision"])
        del ref
        return {"comparison": c.__dict__, "input_mutated": self._shared_changed(msg["key"]),
                **({"reference_unstable": unstable} if unstable else {})}

    def _reference_unstable(self, key: str, ref, precision: str) -> str | None:
        """When a candidate's output failed the comparison: does the reference give that output again on
        the same inputs under another random state? A forward that draws random numbers (KernelBench L2_66:
        dropout, in training mode as the task leaves it) does not, and then no candidate can be judged. The
        rerun's difference, or None (it repeats itself, or the check could not be made: on a GPU it runs only
        where twice the set and the output are free, since no reservation counted on it)."""
        if key not in self.drawn or not self.repeatable:
            return None
        if self.device.type == "cuda":  # memory no reservation counted on: only where the GPU has it to spare
            need = 2 * (nbytes(self.exporter.sets.get(key) or []) + sum(leaf_sizes(ref)))
            if torch.cuda.mem_get_info(self.device)[0] < need:
                return None
        try:
            values = draw(self.task_module, *self.drawn[key], self.device)
            torch.manual_seed(self.drawn[key][0] ^ 0x5EED5)  # not the state the first run had
            again, _ = self._call(values, guarded=False)
            c = compare(again, ref, precision)
        except Exception as e:  # noqa: BLE001 - no room for a second run, say: the candidate's verdict stands
            if _is_cuda_fault(e):
                raise
            return None
        return None if c.ok and not c.problem else (c.problem or c.worst)

    def _shared_changed(self, key: str) -> bool:
        """Does the shared copy of set ``key`` differ from a fresh draw of it? (On the CPU the candidate
        received a copy, and its own worker's check is the one that applies.)"""
        bufs = self.exporter.sets.get(key)
        if bufs is None or key not in self.drawn or self.device.type != "cuda" or not self.repeatable:
            return False
        return not _same_values(bufs, draw(self.task_module, *self.drawn[key], self.device))

    def op_rotation(self, msg: dict) -> dict:
        """The timing loop's input sets: drawn here, the reference's own ring made from them, and a
        shared copy of each for the candidate's ring."""
        sets = [draw(self.task_module, seed, TASK, self.device) for seed in msg["seeds"]]
        self.ring = InputRing(sets, self.device)
        if not msg.get("share", True):  # the baselines' ring, timed before the candidate exists: nothing shared
            return {"sets": [], "repeatable": self.repeatable}
        shared = []
        for i, (seed, values) in enumerate(zip(msg["seeds"], sets)):
            shared.append(self.exporter.share(f"rotation {i}", values))
            self.drawn[f"rotation {i}"] = (seed, TASK)
        del sets
        return {"sets": shared, "repeatable": self.repeatable}

    def op_bandwidth(self, msg: dict) -> dict:
        """The HBM bandwidth a device-to-device copy reaches on this GPU (roofline.measure_copy_bandwidth);
        too little free memory is an answer, not a failure of the worker."""
        try:
            return roofline.measure_copy_bandwidth(self.device)
        except torch.OutOfMemoryError as e:
            return {"unavailable": str(e)[:300]}
        finally:
            torch.cuda.empty_cache()

    def op_check_shared(self, msg: dict) -> dict:
        """Which shared sets no longer hold what was drawn (after the candidate was timed on them)?"""
        return {"mutated": [k for k in msg["keys"] if self._shared_changed(k)]}

    def op_drop(self, msg: dict) -> dict:
        for k in msg["keys"]:
            self.exporter.drop(k)
            self.drawn.pop(k, None)
            self.refs.pop(k, None)
        if msg.get("ring"):  # the baselines' ring, timed before the trials: its sets must not live through them
            self.ring = self.timing_state = None
            if not _REHEARSAL:
                torch.cuda.empty_cache()  # back to the driver, for the candidate's process
        return {}

    # -- candidate: runs on shared sets
    def op_trial(self, msg: dict) -> dict:
        """One checked trial on the shared set ``msg['inputs']`` (the same buffers as the last set under
        ``key`` when ``reuse``); the output is shared back for the reference to judge."""
        self._release_judged()
        bufs = self.importer.open_set(msg["key"], msg["inputs"], msg.get("reuse", False))
        result = self._checked_trial(bufs, msg.get("out_bytes", []))
        del bufs
        if not msg.get("keep", True):  # the next set is a new one: let go of this one's mapping now
            self.importer.drop(msg["key"])
        return {**result, "integrity": self._integrity()}

    def _release_judged(self) -> None:
        """The reference has judged the outputs shared before this request: free them, and the IPC limbo."""
        self.pending = []
        share.collect(self.device)

    def op_compile(self, msg: dict) -> dict:
        """torch.compile the reference and run it once (compilation is CPU work: done before the
        evaluator takes the GPU lock)."""
        t0 = _perf()
        self.compiled = torch.compile(self.model, backend=_COMPILE_BACKEND)
        with torch.no_grad():
            self.compiled(*draw(self.task_module, msg["seed"], TASK, self.device))
        _sync()
        return {"compile_s": _perf() - t0}

    def op_prepare_timing(self, msg: dict) -> dict:
        fn = self.model
        first_call_s = None
        if msg.get("target") == "compile":
            if self.compiled is None:
                self.compiled = torch.compile(self.model, backend=_COMPILE_BACKEND)
            fn = self.compiled
        if self.role == "reference":
            ring = self.ring  # drawn here (op_rotation)
        else:  # the shared sets, copied into the candidate's own buffers
            # a second attempt (the evaluator's retry) frees the first one's ring before it copies the sets
            # again: two rings of a 16 GiB task at once would not fit
            self.timing_state = None
            ring = InputRing([[share.open_tree(d) for d in s] for s in msg["inputs"]], self.device)
            # a retry goes on from the step the first attempt stopped at: values no earlier call has seen
            ring.step = int(msg.get("first_step") or 0)
        with torch.no_grad():
            t0 = _perf()
            fn(*ring.next())
            _sync()
            first_call_s = _perf() - t0
            n_iters, est, warm = timing.plan_iterations(fn, ring, self.flush, msg["warmup_ms"], msg["rep_ms"],
                                                        msg["min_iters"], msg["max_iters"],
                                                        max_window_ms=msg.get("max_window_ms"))
        self.timing_state = (fn, ring, n_iters)
        return {"n_iters": n_iters, "est_ms": est, "first_call_s": first_call_s, "warmup": warm,
                "integrity": self._integrity()}

    def op_time(self, msg: dict) -> dict:
        fn, ring, n_iters = self.timing_state
        seed = msg.get("checksum_seed")
        checksum = timing.OutputChecksum(seed, self.device) if seed is not None else None
        with torch.no_grad():
            res = timing.run_timed(fn, ring, self.flush, n_iters, checksum)
        res["gap_curve"] = self.gap_curve
        res["integrity"] = self._integrity()
        return res

    def op_checksums(self, msg: dict) -> dict:
        """Reference side of the timed-output check: the same inputs the candidate was timed on
        (the same ring from the same step), the same checksums."""
        ring = self.ring
        ring.step = msg["start_step"]
        with torch.no_grad():
            sums = timing.checksums(self.model, ring, msg["n"], timing.OutputChecksum(msg["seed"], self.device))
        return {"checksums": sums}

    def op_recheck(self, msg: dict) -> dict:
        """New values written into the timing buffers (same addresses), checked trials again."""
        _fn, ring, _n = self.timing_state
        self._release_judged()
        bufsets = ring.overwrite([[share.open_tree(d) for d in s] for s in msg["inputs"]])
        self.prev_outputs = None
        results = [self._checked_trial(bufs, msg.get("out_bytes", [])) for bufs in bufsets[: len(msg["inputs"])]]
        return {"trials": results, "integrity": self._integrity()}

    def op_profile(self, msg: dict) -> dict:
        fn, ring, _n = self.timing_state
        iters = msg.get("iters", 3)
        if _REHEARSAL:  # no CUDA kernels to take a census of on the CPU
            return {"kernels": [], "iters": iters, "integrity": self._integrity()}
        with torch.no_grad():
            fn(*ring.next())  # warm-up, untraced
            # refreshed outside the trace (only forward is traced), after the warm-up, each call on values no
            # call saw: with fewer sets than calls (one set of a large task) a set would repeat, and a cache
            # keyed on content would hit and launch none of forward's kernels
            iters = max(1, min(iters, len(ring.bufs)))
            sets = [ring.next() for _ in range(iters)]
            _sync()
            with _kernel_trace() as prof:
                for inputs in sets:
                    fn(*inputs)
                _sync()
        kernels = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None)
            if t is None:
                t = getattr(e, "cuda_time_total", 0)
            if t and t > 0:
                kernels.append({"name": e.key, "count": int(e.count), "cuda_us": float(t)})
        kernels.sort(key=lambda k: -k["cuda_us"])
        return {"kernels": kernels, "iters": iters, "integrity": self._integrity()}


def _kernel_trace():
    """A trace of the CUDA kernels launched inside it (Kineto, device activity only). torch.autograd's
    profiler, which torch.profiler.profile wraps: the wrapper's first use imports torch._inductor, and with
    it dynamo (``hasattr(torch, "_inductor")`` in prepare_trace), seconds that the census does not need."""
    return torch.autograd.profiler.profile(use_cpu=False, use_device="cuda", use_kineto=True)


def _same_values(a: list, b: list) -> bool:
    """Two input sets hold the same tensors bit for bit (plain arguments are not compared)."""
    return all(not isinstance(x, torch.Tensor) or bitwise_equal(x, y) for x, y in zip(a, b))


def _is_cuda_fault(e: BaseException) -> bool:
    return isinstance(e, getattr(torch, "AcceleratorError", ())) or "CUDA error" in str(e)


def _construct(cls, init_inputs: list, seed: int, device: torch.device) -> torch.nn.Module:
    """The task's ``Model(*init_inputs)`` on ``device``: made there (torch's default device for the call),
    so that its weights are initialised on the GPU and never held on the host; a constructor that fails
    that way (one mixing its own CPU tensors in, say) is run again on the CPU. Only trusted code is built
    here: the reference, and the task's own Model as a calibration's candidate."""
    torch.manual_seed(seed)
    if device.type == "cuda":
        try:
            with torch.device(device):
                model = cls(*init_inputs).to(device)
            if not _state_outside_dict(model):
                return model
            del model  # its other tensors would differ from a ModelNew's, which is built on the CPU
        except Exception:  # noqa: BLE001 - built again below, the way KernelBench builds it
            pass
        torch.manual_seed(seed)
    return cls(*init_inputs).to(device)


def _state_outside_dict(model: torch.nn.Module) -> bool:
    """Does ``model`` hold tensors its state_dict does not carry (non-persistent buffers, plain tensor
    attributes)? The candidate cannot receive those, so they must come from the same CPU generator as its own."""
    return any(m._non_persistent_buffers_set or any(isinstance(v, torch.Tensor) for v in vars(m).values())
               for m in model.modules())


def _opened(state_dict: dict) -> dict:
    """The reference's state_dict from its shared descriptors (views of its shared copy, on the GPU)."""
    return {k: share.open_tree(d) for k, d in state_dict.items()}


def _exec_task(source: str, origin: str):
    import types

    module = types.ModuleType("_cuda_agent_task")
    module.__file__ = origin
    sys.modules["_cuda_agent_task"] = module
    exec(compile(source, origin, "exec"), module.__dict__)
    return module


def _exit_with_parent() -> None:
    """Exit, even in the middle of a request, once the process that started this worker is gone
    (a bench killed with SIGKILL): an orphan would keep a GPU busy under the next run's timings.
    A thread that polls, not PR_SET_PDEATHSIG, which fires when the spawning *thread* ends (the
    evaluation service evaluates from threads). Under a wrapper (``ncu``) the parent is the wrapper,
    so a profiling worker outlives a killed evaluator as long as the wrapper does."""
    import threading

    getppid, exit_now, sleep = os.getppid, os._exit, time.sleep  # bound now, before any candidate code

    def watch() -> None:
        while True:
            if getppid() != _PARENT:
                exit_now(0)
            sleep(0.5)

    threading.Thread(target=watch, name="cuda-agent-parent-watch", daemon=True).start()


def main() -> None:
    from multiprocessing.connection import Connection

    global _LANDLOCK, _GUARD
    if os.environ.get(confine.CONFINED_ENV):
        # first: every Python thread the worker starts (the parent watch below) is inside the domain, so a
        # candidate cannot borrow one to send signals from (no ptrace or signals to anything outside);
        # the seccomp guard covers every thread, torch's native ones included (TSYNC)
        _LANDLOCK = confine.enter_landlock()
        _GUARD = confine.enter_process_guard()
    _exit_with_parent()  # before any candidate code: its start is not counted against the candidate
    if "--preload" in sys.argv[2:]:  # a spare (process.SparePool), idle until it is taken
        try:  # what the meta device's kernels and torch.compile import first: seconds, paid while idle
            import torch._dynamo  # noqa: F401
            import torch._inductor.compile_fx  # noqa: F401
        except Exception as e:  # noqa: BLE001 - the step that needs it reports it (footprint, compile)
            _BOOT["compiler_error"] = f"{type(e).__name__}: {e}"[:300]
        _BOOT["compiler_s"] = _since_start()
    if "--warm" in sys.argv[2:] and not _REHEARSAL:
        _warm_cuda()
    conn = Connection(int(sys.argv[1]))
    worker = Worker(conn)
    profile_dir = os.environ.get(PROFILE_ENV)
    if profile_dir:  # diagnostics (benchmarks/sandbox_profile.py): where a worker's time goes, op by op
        _serve_profiled(worker, profile_dir)
    else:
        worker.serve()


PROFILE_ENV = "CUDA_AGENT_WORKER_PROFILE"
"""A directory: each worker writes a cProfile of itself there after every request (it is killed, not
exited, at the end of an evaluation, so it cannot wait until exit)."""


def _serve_profiled(worker: Worker, directory: str) -> None:
    import cProfile

    prof, send = cProfile.Profile(), worker.send
    path = os.path.join(directory, f"worker-{os.getpid()}.prof")

    def send_and_dump(obj) -> None:
        send(obj)
        prof.disable()
        prof.dump_stats(path + ".tmp")
        os.replace(path + ".tmp", path)  # whole files only: the worker may be killed at any moment
        prof.enable()

    worker.send = send_and_dump
    prof.enable()
    worker.serve()


if __name__ == "__main__":
    main()
