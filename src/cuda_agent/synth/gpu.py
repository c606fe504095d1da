"""The deferred GPU pass: scale shapes into the runtime window, time, compile.

For each task:

1. **Shape scaling.** Module-level integer constants are the knobs (``batch_size``
   first, then other sizes >= 8 whose names are not kernel/stride/padding/groups/heads
   ...; any KernelBench-format file works, Ops-6K included). A candidate scaling is
   applied by rewriting the literals in the source, and validated on ``meta`` tensors
   (the model builds and runs, and inputs + parameters + outputs fit ``max_bytes``).
   From the measured time the next step multiplies the constants by powers of two
   toward the window's geometric middle (small shapes are launch-bound, so it takes a
   few rounds), down as well as up, at most ``max_rounds`` times.
2. **Timing.** CUDA events around the eager forward, median of ``reps`` runs after
   ``warmup`` runs; before each timed run a buffer twice the L2 size is written, so no
   run starts with its inputs in L2.
3. **Compile.** ``torch.compile`` (inductor) of the scaled model must match eager
   (rtol = atol = 1e-2, as KernelBench) and produce finite outputs; its median time is
   recorded as ``compile_ms``.

Outcomes: ``runtime`` pass (eager_ms in the window) or fail (why), ``compile`` pass or
fail. Everything here needs ``torch.cuda``; :func:`scalable_constants` and
:func:`rewrite_constants` are plain Python and tested on CPU.
"""

from __future__ import annotations

import ast
import math
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import ConfigError

NO_SCALE = re.compile(r"kernel|stride|pad|dilation|group|head|factor|layer|axis|^dim$|^k$|"
                      r"^p$|num_classes|margin|eps|scale|bias_shape|shape", re.I)
BATCH = re.compile(r"batch|^n$|^b$|^bs$", re.I)


def module_constants(source: str) -> dict[str, tuple[int, ast.Constant]]:
    """Module-level ``NAME = <int literal>`` assignments: name -> (value, node)."""
    tree = ast.parse(source)
    out: dict[str, tuple[int, ast.Constant]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            out[node.targets[0].id] = (node.value.value, node.value)
    return out


def scalable_constants(source: str) -> list[str]:
    """Size constants worth scaling, batch-like names first."""
    consts = module_constants(source)
    names = [n for n, (v, _) in consts.items()
             if (BATCH.search(n) and v >= 1) or (v >= 8 and not NO_SCALE.search(n))]
    return sorted(names, key=lambda n: (not BATCH.search(n), list(consts).index(n)))


def rewrite_constants(source: str, values: dict[str, int]) -> str:
    """``source`` with the module-level int literals of ``values`` replaced."""
    consts = module_constants(source)
    lines = source.splitlines(keepends=True)
    edits = sorted(((consts[n][1], v) for n, v in values.items() if n in consts),
                   key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True)
    for node, v in edits:
        if node.lineno != node.end_lineno:
            continue
        ln = lines[node.lineno - 1]
        lines[node.lineno - 1] = ln[:node.col_offset] + str(int(v)) + ln[node.end_col_offset:]
    return "".join(lines)


def _load(source: str, name: str):
    from cuda_agent.tasks import Task

    return Task(name, source).load_module()


def _unload(module) -> None:
    sys.modules.pop(getattr(module, "__name__", ""), None)


def meta_footprint(source: str, name: str = "scaled") -> int | None:
    """Bytes of inputs + parameters + outputs on meta tensors, or None if it fails."""
    import torch

    try:
        module = _load(source, name)
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
            out = model(*[t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs])
        _unload(module)
    except Exception:  # noqa: BLE001 - a scaling that breaks the task is just invalid
        return None
    outs = out if isinstance(out, (tuple, list)) else [out]
    tensors = [t for t in [*inputs, *model.parameters(), *outs] if isinstance(t, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class GpuResult:
    runtime: str
    compile: str
    eager_ms: float | None = None
    compile_ms: float | None = None
    source: str = ""
    constants: dict[str, int] = field(default_factory=dict)
    rounds: int = 0
    seconds: float = 0.0


class GpuChecker:
    """Times and compiles tasks on one CUDA device (see module docstring)."""

    def __init__(self, window_ms: tuple[float, float] = (1.0, 100.0), device: str = "cuda",
                 max_bytes: int = 24 << 30, reps: int = 10, warmup: int = 3, max_rounds: int = 8,
                 compile: bool = True):
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise ConfigError("--device cuda: torch sees no CUDA device")
        self.lo, self.hi = window_ms
        self.target = math.sqrt(self.lo * self.hi)
        self.max_bytes, self.reps, self.warmup, self.max_rounds = max_bytes, reps, warmup, max_rounds
        self.do_compile = compile
        # device="cpu" runs the same logic with wall-clock timing: for tests, not a measurement.
        l2 = 1 << 20
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            l2 = int(getattr(props, "L2_cache_size", 0) or 64 << 20)
        self.flush = torch.empty(2 * l2 // 4, dtype=torch.float32, device=self.device)

    # -- timing --------------------------------------------------------------------------

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def _time(self, fn, inputs) -> float:
        torch = self.torch
        with torch.no_grad():
            t0 = time.perf_counter()
            fn(*inputs)
            self._sync()
            first = (time.perf_counter() - t0) * 1e3
            warm = self.warmup if first < 2000 else 1
            for _ in range(warm - 1):
                fn(*inputs)
            times = []
            reps = self.reps if first < 2000 else 3
            for _ in range(reps):
                self.flush.zero_()
                if not self.cuda:
                    t1 = time.perf_counter()
                    fn(*inputs)
                    times.append((time.perf_counter() - t1) * 1e3)
                    continue
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*inputs)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
        return statistics.median(times)

    def _build(self, source: str, name: str):
        torch = self.torch
        module = _load(source, name)
        torch.manual_seed(0)
        with warnings.catch_warnings(), torch.device(self.device):  # build and draw on the GPU: fast
            warnings.simplefilter("ignore")
            model = module.Model(*module.get_init_inputs()).to(self.device)
            torch.manual_seed(1)
            inputs = [t.to(self.device) if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
        _unload(module)
        return model, inputs

    def measure(self, source: str, name: str = "task") -> float:
        model, inputs = self._build(source, name)
        try:
            return self._time(model, inputs)
        finally:
            del model, inputs
            self._empty_cache()

    def _empty_cache(self) -> None:
        if self.cuda:
            self.torch.cuda.empty_cache()

    # -- scaling ---------------------------------------------------------------------------

    def _step(self, source: str, values: dict[str, int], knobs: list[str], factor: float,
              frozen: set[str]) -> dict[str, int] | None:
        """Multiply knobs by powers of two (round-robin, batch first) by about ``factor``."""
        base = module_constants(source)
        steps = int(round(math.log2(factor)))
        steps = max(-12, min(12, steps)) or (1 if factor > 1 else -1)
        new = dict(values)
        moved = 0
        order = [k for k in knobs if k not in frozen]
        i = 0
        while moved < abs(steps) and order:
            k = order[i % len(order)]
            v = new[k] * 2 if steps > 0 else new[k] // 2
            if v < 1 or v > base[k][0] * 4096:
                order.remove(k)
                continue
            trial = {**new, k: v}
            fp = meta_footprint(rewrite_constants(source, trial))
            if fp is None or fp > self.max_bytes:
                order.remove(k)
                frozen.add(k) if fp is None else None
                continue
            new = trial
            moved += 1
            i += 1
        return new if moved else None

    def check_source(self, source: str, name: str = "task") -> GpuResult:
        t0 = time.perf_counter()
        torch = self.torch
        knobs = scalable_constants(source)
        values = {k: module_constants(source)[k][0] for k in knobs}
        frozen: set[str] = set()
        current = source
        try:
            t = self.measure(current, name)
        except Exception as e:  # noqa: BLE001
            return GpuResult(f"fail: eager on GPU: {type(e).__name__}: {str(e)[:200]}", "skipped: eager failed",
                             source=source, seconds=time.perf_counter() - t0)
        rounds = 0
        why = ""
        while not (self.lo <= t <= self.hi) and rounds < self.max_rounds:
            rounds += 1
            if not knobs:
                why = "no size constant to scale"
                break
            factor = self.target / max(t, 1e-3)
            if t < self.lo:
                factor = min(factor, 64.0)  # launch-bound at small sizes: go in steps
            new = self._step(source, values, knobs, factor, frozen)
            if new is None:
                why = "no valid scaling within the memory cap"
                break
            values = new
            current = rewrite_constants(source, values)
            try:
                t = self.measure(current, name)
            except torch.cuda.OutOfMemoryError:
                self._empty_cache()
                why = "out of memory while scaling"
                break
            except Exception as e:  # noqa: BLE001
                why = f"scaled task failed: {type(e).__name__}"
                break
        res = GpuResult("", "pending", eager_ms=round(t, 4), source=current, rounds=rounds,
                        constants={k: v for k, v in values.items()})
        if self.lo <= t <= self.hi:
            res.runtime = "pass"
        else:
            res.runtime = (f"fail: eager {t:.3g} ms outside [{self.lo:g}, {self.hi:g}] ms after "
                           f"{rounds} scaling rounds" + (f" ({why})" if why else ""))
        if self.do_compile:
            res.compile, res.compile_ms = self.compile_check(current, name)
        res.seconds = time.perf_counter() - t0
        return res

    # -- inductor ----------------------------------------------------------------------------

    def compile_check(self, source: str, name: str = "task", timed: bool = True) -> tuple[str, float | None]:
        torch = self.torch
        import torch._dynamo as dynamo

        try:
            model, inputs = self._build(source, name)
            with torch.no_grad():
                expected = model(*inputs)
                dynamo.reset()
                compiled = torch.compile(model)
                got = compiled(*inputs)
                exp = expected if isinstance(expected, (tuple, list)) else [expected]
                out = got if isinstance(got, (tuple, list)) else [got]
                for a, b in zip(exp, out):
                    if not bool(torch.isfinite(a).all()):
                        return "fail: NaN/Inf in eager output at scaled shapes", None
                    if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-2, atol=1e-2):
                        return "fail: inductor output differs from eager", None
            if not timed:
                return "pass", None
            ms = self._time(compiled, inputs)
            return "pass", round(ms, 4)
        except Exception as e:  # noqa: BLE001
            return f"fail: inductor: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", None
        finally:
            dynamo.reset()
            self._empty_cache()

    # -- rows ------------------------------------------------------------------------------

    def check_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """Apply to a synth record/row: filters, eager_ms, scaled code and constants."""
        import json

        from .filters import accepted, first_failure

        res = self.check_source(record["code"], record.get("name") or "task")
        filters = record.get("filters") or {}
        if isinstance(filters, str):
            filters = json.loads(filters)
        filters = dict(filters)
        filters["runtime"], filters["compile"] = res.runtime, res.compile
        out = dict(record)
        out["filters"] = filters
        out["eager_ms"] = res.eager_ms
        out["compile_ms"] = res.compile_ms
        out["gpu_seconds"] = round(res.seconds, 3)
        if res.source != record["code"]:
            out["code"] = res.source
            shapes = out.get("shapes")
            if isinstance(shapes, str):
                shapes = json.loads(shapes)
            if isinstance(shapes, dict):
                shapes = dict(shapes)
                shapes["constants"] = {**shapes.get("constants", {}), **res.constants}
                shapes["scaled"] = True
                out["shapes"] = shapes
        if "status" in out:
            out["status"] = "accepted" if accepted(filters) else "rejected"
            if out["status"] == "rejected":
                out["reason"] = first_failure(filters)
        return out


_COMPILE_WORKER: dict[str, Any] = {}


def _compile_init(device: str) -> None:
    _COMPILE_WORKER["checker"] = GpuChecker(device=device, compile=True)


def _compile_job(job: tuple[int, str, str]) -> tuple[int, str]:
    """In a worker process: the inductor check of one (scaled) task; no timing."""
    i, source, name = job
    status, _ = _COMPILE_WORKER["checker"].compile_check(source, name, timed=False)
    return i, status


def retry_out_of_memory(status: str, row: dict[str, Any], checker: GpuChecker) -> str:
    """A compile worker's out-of-memory says nothing about the task (every compile worker shares
    the GPU): check the row again in this process, one at a time."""
    if status.startswith("fail: inductor: OutOfMemoryError"):
        status, _ = checker.compile_check(row["code"], row["name"], timed=False)
    return status


def filter_file(src: Path, dst: Path, device: str = "cuda", window_ms=(1.0, 100.0), limit: int | None = None,
                keep_failed: bool = False, kernelbench: Path | None = None, progress: bool = True,
                compile: bool = True, time_budget_s: float | None = None,
                compile_workers: int | None = None) -> str:
    """Run the deferred checks on every row of ``src``; write ``dst``. Resumable.

    Rows without CPU outcomes (e.g. Ops-6K as published) get the CPU filters first.
    This process scales and times each row, one at a time (timings stay clean); the
    inductor compiles, which are CPU-bound, run in ``compile_workers`` processes meanwhile
    (default: cores - 4, at most 8; 0 = compile here, and also time the compiled model as
    ``compile_ms``). Progress lives in ``<dst>.parts/`` like a synth run; a rerun skips
    finished rows. Returns a one-line summary.
    """
    import json
    import multiprocessing as mp
    import os

    from .filters import CPU_FILTERS, accepted, check_cpu, first_failure
    from .writer import RunLog, read_rows, write_rows

    src, dst = Path(src), Path(dst)
    rows = list(read_rows(src))
    if limit is not None:
        rows = rows[:limit]
    kb = None
    if kernelbench is not None:
        from cuda_agent.tasks import TaskError

        from .decontam import KernelBenchIndex

        try:
            kb = KernelBenchIndex(kernelbench)
        except (TaskError, OSError) as e:
            raise ConfigError(f"--kernelbench {kernelbench}: {e}") from None
    if compile_workers is None:
        compile_workers = max(0, min(8, (os.cpu_count() or 1) - 4)) if device.startswith("cuda") else 0
    parallel = compile and compile_workers > 0
    checker = GpuChecker(window_ms=window_ms, device=device, compile=compile and not parallel)
    log = RunLog(dst.with_name(dst.name + ".parts"),
                 {"src": str(src.resolve()), "window_ms": list(window_ms), "compile": compile,
                  "kernelbench": str(kernelbench) if kernelbench else None})
    done = {r["attempt"] for r in log.records}
    todo = [i for i in range(len(rows)) if i not in done]
    t0 = time.perf_counter()
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(rows), initial=len(done), unit="task", desc="gpu filter")
        except ImportError:
            bar = None
    pool = mp.get_context("spawn").Pool(compile_workers, _compile_init, (device,)) if parallel else None
    waiting: dict[int, dict[str, Any]] = {}
    pending = []

    def finish(row: dict[str, Any]) -> None:
        row["status"] = "accepted" if accepted(row["filters"]) else "rejected"
        row["reason"] = first_failure(row["filters"])
        log.append(row)
        if bar is not None:
            bar.update(1)
        elif progress and len(log.records) % 10 == 0:
            print(f"gpu filter: {len(log.records)}/{len(rows)}", file=sys.stderr, flush=True)

    def collect(block: bool) -> None:
        for res in list(pending):
            if block or res.ready():
                i, status = res.get()
                pending.remove(res)
                row = waiting.pop(i)
                status = retry_out_of_memory(status, row, checker)
                row["filters"]["compile"] = status
                finish(row)

    try:
        for i in todo:
            if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                break
            row = dict(rows[i])
            filters = row.get("filters")
            if isinstance(filters, str):
                filters = json.loads(filters)
            if not filters:  # a dataset as published: run the CPU rubric first
                filters = check_cpu(row["code"], name=f"row{i}").results
            if kb is not None and str(filters.get("decontam", "pending")).startswith("pending"):
                filters["decontam"] = kb.check(row["code"])
            row["filters"] = filters
            row.setdefault("name", f"{src.stem}_{i}")
            row["attempt"] = i
            if all(filters.get(k) == "pass" or str(filters.get(k)).startswith("pending")
                   for k in CPU_FILTERS if k in filters):
                try:
                    row = checker.check_record(row)
                except Exception as e:  # noqa: BLE001 - one odd row must not end the pass
                    row["filters"]["runtime"] = f"fail: GPU check: {type(e).__name__}: {str(e)[:200]}"
                    row["filters"]["compile"] = "skipped: runtime check failed"
            else:
                row["filters"]["runtime"] = "skipped: a CPU check failed"
                row["filters"]["compile"] = "skipped: a CPU check failed"
            if pool is not None and row["filters"].get("compile") == "pending" \
                    and not str(row["filters"].get("runtime")).startswith("skipped"):
                waiting[i] = row
                pending.append(pool.apply_async(_compile_job, ((i, row["code"], row["name"]),)))
            else:
                finish(row)
            collect(block=False)
        collect(block=True)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        if bar is not None:
            bar.close()
        log.close()
    records = sorted(log.records, key=lambda r: r["attempt"])
    keep = [r for r in records if keep_failed or r["status"] == "accepted"]
    write_rows(keep, dst)
    timed = [r for r in records if r.get("gpu_seconds") is not None]
    in_window = sum(1 for r in records if r["filters"].get("runtime") == "pass")
    compiled = sum(1 for r in records if r["filters"].get("compile") == "pass")
    secs = (time.perf_counter() - t0) / max(len(records) - len(done), 1)
    left = len(rows) - len(records)
    return (f"{len(records)}/{len(rows)} rows checked" + (f" ({left} left: rerun to continue)" if left else "")
            + f"; runtime in window: {in_window}/{len(records)}; inductor ok: {compiled}/{len(records)}; "
            f"accepted: {sum(r['status'] == 'accepted' for r in records)}; "
            f"{secs:.2f} s wall per task this run ({len(timed)} timed); wrote {len(keep)} rows to {dst}")
