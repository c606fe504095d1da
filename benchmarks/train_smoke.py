"""Training smoke on one GPU (H200), <= 10 minutes: ``cuda-agent train recipe --preset smoke`` in a fresh
work directory, plus what only a benchmark wants: a flat report copy and, with two GPUs, the
evaluation service on a GPU of its own and a probe of timings taken while training runs.

    PYTHONUNBUFFERED=1 python benchmarks/train_smoke.py --out /tmp/train_smoke --report $OUT
    python benchmarks/train_smoke.py --allow-cpu                   # the cpu preset: plumbing, every reward -1
    python benchmarks/train_smoke.py --service-gpu 1 --timing-probe [--set rft.max_steps=300 ...]

The recipe (src/cuda_agent/train/recipe.py) does the work: the demo's honest episodes recorded through
the agent loop, a tiny model, single-turn GRPO, the tiny agent's reward before RFT (-1), RFT, the
reward after RFT (> 0 expected), value pretraining, agentic GRPO and the reward after it (not lower
expected); summary.json and reward_curve.png under --out. Extra arguments (``--set STAGE.key=value``,
``--stop-after``) go to the recipe. --report DIR gets summary.json, reward_curve.png, <stage>.csv, the
honest and evaluated trajectories and the agentic rollouts, flat.

``--rehearsal``: the whole demo on CPU with real verdicts (the sandbox's CPU rehearsal,
CUDA_AGENT_REHEARSAL=cpu, and a host-code honest solution from tests/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

REPORT_FILES = {"summary.json": "summary.json", "reward_curve.png": "reward_curve.png",
                "data/honest.jsonl": "honest.jsonl", "eval_after_rft/episodes.jsonl": "eval_rft.jsonl",
                "eval_after_grpo/episodes.jsonl": "eval_grpo.jsonl", "agentic/rollouts.jsonl": "agentic_rollouts.jsonl",
                **{f"{s}/metrics.csv": f"{s}.csv" for s in ("single_turn", "rft", "value", "agentic")}}
"""What --report gets: run-directory path -> flat name (the device brings back a handful of files)."""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="/tmp/train_smoke", help="work directory (wiped first unless --resume)")
    p.add_argument("--resume", action="store_true", help="keep --out and resume the recipe there")
    p.add_argument("--report", default=os.environ.get("OUT"), help="copy the small result files here (flat)")
    p.add_argument("--budget-s", type=float, default=540.0, help="start no step after this many seconds")
    p.add_argument("--service-gpu", type=int, default=0,
                   help="GPU for the evaluation service; not 0: `cuda-agent train serve` in its own process there, "
                        "while training sees GPU 0 alone")
    p.add_argument("--timing-probe", action="store_true",
                   help="time one honest kernel through the service idle, then over and over while the GRPO "
                        "stages train: do timings taken during training match idle ones?")
    p.add_argument("--rehearsal", action="store_true", help="CPU demo with real verdicts (sandbox CPU rehearsal)")
    p.add_argument("--allow-cpu", action="store_true", help="the cpu preset (plumbing; verify has no GPU)")
    args, recipe_args = p.parse_known_args()

    if args.service_gpu != 0:  # training sees GPU 0 alone (a Trainer that saw two would use both)
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    import torch

    from cuda_agent.train.client import EvalClient
    from cuda_agent.train.command import add_arguments
    from cuda_agent.train.recipe import Recipe, load_recipe, split_overrides

    if not torch.cuda.is_available() and not (args.allow_cpu or args.rehearsal):
        print("train_smoke: needs a CUDA GPU (or --allow-cpu / --rehearsal)", file=sys.stderr)
        return 3
    out = Path(args.out)
    if out.exists() and not args.resume:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "cache"  # a fresh sandbox cache: the demo's recorded compile replies are the cached ones
    os.environ["CUDA_AGENT_CACHE"] = str(cache)

    parser = argparse.ArgumentParser(prog="train_smoke recipe arguments")
    add_arguments(parser)
    rargs = parser.parse_args(["recipe", *recipe_args])
    overrides = split_overrides(rargs.overrides)
    values = {"out": str(out), "budget_s": args.budget_s,
              **{k: getattr(rargs, k) for k in ("model", "tasks", "trajectories", "eval_url", "launcher", "stop_after")
                 if getattr(rargs, k)}}
    if args.rehearsal:
        os.environ["CUDA_AGENT_REHEARSAL"] = "cpu"
        values.update(demo_dir=str(_rehearsal_demo(out / "rehearsal_demo")), demo_tasks=1)
    service = None
    if torch.cuda.is_available() and (args.service_gpu != 0 or args.timing_probe):
        service = ServiceProcess(args.service_gpu, cache, out / "service.log") if args.service_gpu != 0 else \
            _in_process_service(cache)
        values["eval_url"] = service.url
    preset = rargs.preset or ("cpu" if args.allow_cpu else "smoke")
    cfg = load_recipe(preset, values, overrides.pop("recipe", []))
    recipe = Recipe(cfg, preset, overrides=overrides)
    probe = TimingProbe(EvalClient(service.url, retries=3), cfg) if args.timing_probe and service else None
    try:
        if probe:
            probe.idle(3)
        summary = recipe.run(on_step=probe.on_step if probe else None)
    finally:
        if service:
            service.stop()
        if probe:
            summary_path = out / "summary.json"
            summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
            summary["timing_probe"] = probe.summary(args.service_gpu)
            summary_path.write_text(json.dumps(summary, indent=1, default=str))
            print("timing probe:", json.dumps(summary["timing_probe"]))
        if args.report:
            _report(out, Path(args.report))
    print(json.dumps({k: summary.get(k) for k in ("reward_curve", "learned", "grpo_kept_it",
                                                  "same_solutions_after_grpo", "stopped", "wall_s")}, indent=1))
    return 0


def _report(out: Path, rep: Path) -> None:
    rep.mkdir(parents=True, exist_ok=True)
    for src, name in REPORT_FILES.items():
        if (out / src).exists():
            shutil.copy(out / src, rep / name)


def _rehearsal_demo(root: Path) -> Path:
    """tests/' CPU-rehearsal pair in the demo layout (``<name>/task.py``, ``<name>/solution/``)."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "swish_small").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "tasks" / "swish_small.py", root / "swish_small" / "task.py")
    shutil.copytree(ROOT / "tests" / "solutions" / "rehearsal_swish_cpu", root / "swish_small" / "solution")
    return root


def _in_process_service(cache: Path):
    from cuda_agent.train.service import EvalService, EvalServiceConfig

    return EvalService(EvalServiceConfig(port=0, gpus=[0], per_gpu=2, cache_dir=cache)).start()


class ServiceProcess:
    """``cuda-agent train serve`` on one GPU, in a process of its own; ``url`` once it answers."""

    def __init__(self, gpu: int, cache: Path, log: Path):
        from cuda_agent.train.client import EvalClient, EvalUnavailable

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = dict(os.environ, CUDA_AGENT_CACHE=str(cache), CUDA_VISIBLE_DEVICES=str(gpu))
        self.log = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", "train", "serve", "--gpus", "0",
                                      "--port", str(port), "--per-gpu", "2"], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while True:
            try:
                if EvalClient(self.url, timeout_s=5, retries=0).health().get("ok"):
                    return
            except EvalUnavailable:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f"the evaluation service did not come up on GPU {gpu}: see {log}")
            time.sleep(0.5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class TimingProbe:
    """One honest demo kernel timed through the evaluation service: a few times while nothing else
    runs, then back to back while a GRPO stage trains (on another GPU, or on the same one)."""

    STAGES = ("single_turn", "agentic")

    def __init__(self, client, cfg):
        from cuda_agent.train.demo import honest_pairs
        from cuda_agent.train.rewards import SandboxReward
        from cuda_agent.train.solution_io import read_files, render_files

        task, solution = honest_pairs(cfg.demo_dir)[0]
        self.reward = SandboxReward(SandboxReward.Config(), [task], client)
        self.task, self.text = task.name, render_files(read_files(solution))
        self.idle_ms: list[float] = []
        self.training_ms: dict[str, list[float]] = {}
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def _one(self) -> float | None:
        r = self.reward.evaluate_text(self.task, self.text)
        return r.verdict.ms if r.verdict.verdict == "correct" else None

    def idle(self, n: int) -> None:
        self.idle_ms += [ms for ms in (self._one() for _ in range(n)) if ms]

    def on_step(self, step: str, event: str) -> None:
        """The recipe's step hook: probe while each GRPO stage runs."""
        if step not in self.STAGES:
            return
        if event == "start":
            self._stop, got = threading.Event(), self.training_ms.setdefault(step, [])
            stop = self._stop

            def loop() -> None:
                while not stop.is_set():
                    ms = self._one()
                    if ms and not stop.is_set():  # an evaluation that ended after training did is not counted
                        got.append(ms)

            self._thread = threading.Thread(target=loop, daemon=True)
            self._thread.start()
        elif self._stop is not None:
            self._stop.set()
            with contextlib.suppress(Exception):
                self._thread.join(300)

    def summary(self, service_gpu: int) -> dict:
        during = [ms for v in self.training_ms.values() for ms in v]
        res = {"service_gpu": service_gpu, "training_gpu": 0, "idle_ms": self.idle_ms,
               "training_ms": self.training_ms}
        if self.idle_ms and during:
            idle = statistics.median(self.idle_ms)
            res.update(ratio_median=round(statistics.median(during) / idle, 4),
                       within_3pct=sum(abs(ms / idle - 1) <= 0.03 for ms in during), during_n=len(during))
        return res


if __name__ == "__main__":
    sys.exit(main())
