"""Training recipe smoke on one GPU (H200), <= 10 minutes, tiny local model, real sandbox.

    PYTHONUNBUFFERED=1 python benchmarks/train_smoke.py --out /tmp/train_smoke --report $OUT

What it runs, in order (every sandbox call is real; only the model is a toy):
  1. the evaluation service on GPU 0 (in this process; with ``--service-gpu N``, ``cuda-agent train
     serve`` on GPU N in its own process while training sees GPU 0 alone) and one honest kernel
     through it, while
  2. honest trajectories for a handful of tasks (tests/solutions, examples/swish) are recorded by
     replaying scripted turns through the agent loop (ReplayBackend: tools and sandbox real);
  3. a tiny random-init causal LM whose tokenizer is trained on that text;
  4. single-turn GRPO, 2 steps, rewards from the sandbox through the service;
  5. the "it learns" demo, in the paper's order: mean sandbox reward of the tiny model as an agent
     before RFT (-1) and after RFT on the cleaned honest trajectories (> 0 expected); value
     pretraining on the episodes so far (honest, before and after RFT), reporting explained
     variance; 2 agentic GRPO steps with our tools (TRL environment, verify through the service)
     and the mean reward after them (not lower expected).
Writes summary.json, reward_curve.png and each stage's run directory (metrics.csv/png) under --out;
summary.json and reward_curve.png are rewritten after every stage. --report DIR gets a flat copy of the small files (summary.json,
reward_curve.png, <stage>.csv, the honest and evaluated trajectories honest.jsonl / eval_rft.jsonl /
eval_grpo.jsonl, and the agentic rollouts as agentic_rollouts.jsonl).

On one GPU the service times kernels on the GPU that also trains; give it a GPU of its own where
there are two (``--service-gpu 1``) and on a cluster (docs/train.md). ``--timing-probe`` measures
what sharing costs: one honest kernel timed idle, then over and over while the GRPO stages train.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_TURNS = 10
"""One turn budget for recording, evaluation and agentic rollouts: the agent's task prompt states
it, and the tiny model reproduces what it memorized only from the very prompt it saw."""
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="/tmp/train_smoke", help="work directory (models, checkpoints, episodes)")
    p.add_argument("--report", default=os.environ.get("OUT"), help="copy the small result files here (flat)")
    p.add_argument("--tasks", type=int, default=4, help="honest (task, solution) pairs to use (max 4)")
    p.add_argument("--rft-steps", type=int, default=400)
    p.add_argument("--rft-lr", type=float, default=2e-3)
    p.add_argument("--grpo-steps", type=int, default=2)
    p.add_argument("--grpo-lr", type=float, default=1e-6)
    p.add_argument("--grpo-temperature", type=float, default=0.85,
                   help="sampling temperature of the agentic rollouts. H200: at 1.0 none of 8 rollouts of the RFT'd "
                        "tiny model reached a verified solution, at 0.7 all 4 did with equal rewards; either way every "
                        "group-relative advantage was zero, and so was the gradient")
    p.add_argument("--grpo-generations", type=int, default=4,
                   help="rollouts per task in each agentic GRPO step (one task per step)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="per turn after RFT (default 3072; 64 with --small)")
    p.add_argument("--budget-s", type=float, default=540.0, help="skip stages that would start after this")
    p.add_argument("--min-reward", type=float, default=1.0, help="RFT keeps episodes with at least this reward")
    p.add_argument("--small", action="store_true", help="a smaller tiny model and shorter generations")
    p.add_argument("--service-gpu", type=int, default=0,
                   help="the GPU the evaluation service times kernels on (training uses GPU 0)")
    p.add_argument("--timing-probe", action="store_true",
                   help="time one honest kernel through the service while idle and again and again while the "
                        "GRPO stages train: do timings taken during training match idle ones?")
    p.add_argument("--rehearsal", action="store_true",
                   help="CPU check of the whole demo with real verdicts: the sandbox's CPU rehearsal "
                        "(CUDA_AGENT_REHEARSAL=cpu) and a host-code honest solution (tests/solutions/rehearsal_swish_cpu)")
    p.add_argument("--allow-cpu", action="store_true",
                   help="plumbing check without a GPU (verify says no GPU: use --min-reward -1 --small)")
    args = p.parse_args()
    if args.max_new_tokens is None:
        args.max_new_tokens = 64 if args.small else 3072

    if args.service_gpu != 0:
        # training sees GPU 0 alone (a Trainer that saw two would spread over both with DataParallel)
        os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    import torch

    if not torch.cuda.is_available() and not (args.allow_cpu or args.rehearsal):
        print("train_smoke: needs a CUDA GPU", file=sys.stderr)
        return 3
    from cuda_agent.train.agent_env import SessionConfig, initial_messages
    from cuda_agent.train.agentic import AgenticStage
    from cuda_agent.train.client import EvalClient
    from cuda_agent.train.common import OptimConfig, RunConfig
    from cuda_agent.train.data import single_turn_prompt
    from cuda_agent.train.demo import evaluate_policy, honest_pairs, record_episodes
    from cuda_agent.train.rewards import SandboxReward
    from cuda_agent.train.rft import RFTStage
    from cuda_agent.train.service import EvalService, EvalServiceConfig
    from cuda_agent.train.single_turn import SandboxSettings, SingleTurnStage
    from cuda_agent.train.solution_io import read_files, render_files
    from cuda_agent.train.tiny import TinyModelConfig, make_tiny_model
    from cuda_agent.train.trajectories import read_episodes
    from cuda_agent.train.value import ValueStage

    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cache = out / "cache"
    os.environ["CUDA_AGENT_CACHE"] = str(cache)
    summary: dict = {"timings_s": {}}
    t_all = time.perf_counter()

    def timed(name):
        class T:
            def __enter__(self):
                self.t = time.perf_counter()
                print(f"== {name} (at {self.t - t_all:.0f} s)", flush=True)

            def __exit__(self, typ, value, tb):
                summary["timings_s"][name] = round(time.perf_counter() - self.t, 1)
                print(f"   {name}: {summary['timings_s'][name]} s", flush=True)
                if typ is not None:  # record and go on: later stages that needed this one fail in turn
                    text = "".join(traceback.format_exception(typ, value, tb))
                    summary.setdefault("errors", {})[name] = text[-3000:]
                    print(text, flush=True)
                write_summary()  # after every stage: a run cut short by its time limit keeps what it did
                return typ is not None and issubclass(typ, Exception)
        return T()

    curve: list[tuple[str, list[float]]] = []

    def write_summary() -> None:
        summary["reward_curve"] = [{"point": name, "rewards": rs, "mean": sum(rs) / len(rs),
                                    "pass_rate": sum(r > 0 for r in rs) / len(rs)} for name, rs in curve]
        summary["tasks"] = [t.name for t in tasks]
        means = [sum(rs) / len(rs) for _, rs in curve]
        summary["learned"] = len(means) >= 2 and means[0] < 0 < means[1]
        summary["grpo_kept_it"] = len(means) >= 3 and means[2] >= means[1] - 1e-9
        eps = summary.get("episodes", {})
        if eps.get("after_rft") and eps.get("after_grpo"):
            # the same files after GRPO: a reward that moved is the timing's doing, not the policy's
            summary["same_solutions_after_grpo"] = [a["fingerprint"] is not None and a["fingerprint"] == b["fingerprint"]
                                                    for a, b in zip(eps["after_rft"], eps["after_grpo"])]
        summary["checkpoints"] = {stage: sorted(d.name for d in (out / stage).iterdir()
                                                if d.is_dir() and (d.name == "final" or d.name.startswith("checkpoint-")))
                                  for stage in ("single_turn", "rft", "value", "agentic") if (out / stage).is_dir()}
        summary["wall_s"] = round(time.perf_counter() - t_all, 1)
        if curve:
            _plot(curve, _rows(out / "rft"), out / "reward_curve.png")
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        if args.report:
            rep = Path(args.report)
            rep.mkdir(parents=True, exist_ok=True)
            for f in ("summary.json", "reward_curve.png", "honest.jsonl", "eval_rft.jsonl", "eval_grpo.jsonl"):
                if (out / f).exists():
                    shutil.copy(out / f, rep / f)
            for stage in ("single_turn", "rft", "agentic", "value"):
                if (out / stage / "metrics.csv").exists():
                    shutil.copy(out / stage / "metrics.csv", rep / f"{stage}.csv")
            if (out / "agentic" / "rollouts.jsonl").exists():
                shutil.copy(out / "agentic" / "rollouts.jsonl", rep / "agentic_rollouts.jsonl")

    if args.rehearsal:
        from cuda_agent.tasks import load_task

        os.environ["CUDA_AGENT_REHEARSAL"] = "cpu"
        pairs = [(load_task(ROOT / "tests/tasks/swish_small.py", name="swish_small"),
                  ROOT / "tests/solutions/rehearsal_swish_cpu")]
    else:
        pairs = honest_pairs(ROOT)[: args.tasks]
    tasks = [t for t, _ in pairs]
    task_dir = out / "tasks"
    task_dir.mkdir()
    for t in tasks:
        (task_dir / f"{t.name}.py").write_text(t.source)
    if args.service_gpu == 0:  # one GPU: the service in this process, timing on the GPU that trains
        service = EvalService(EvalServiceConfig(port=0, gpus=[0], per_gpu=2, cache_dir=cache)).start()
    else:  # as deployed: `cuda-agent train serve` in its own process, on a GPU this process cannot see
        service = ServiceProcess(args.service_gpu, cache, out / "service.log")
    client = EvalClient(service.url, retries=3)
    probe = None
    try:
        def service_check() -> dict:
            t0 = time.perf_counter()
            reward = SandboxReward(SandboxReward.Config(), tasks, client)
            r = reward.evaluate_text(tasks[0].name, render_files(read_files(pairs[0][1])))
            return {"task": tasks[0].name, "verdict": r.verdict.verdict, "reward": r.reward,
                    "speedup_vs_compile": r.verdict.speedup_vs_compile, "queue_s": r.queue_s,
                    "s": round(time.perf_counter() - t0, 1)}

        # The service check runs while the honest episodes are recorded (builds and torch.compile
        # overlap; timings still take the GPU one at a time, under the sandbox's GPU lock). The
        # timing probe's idle figures need the GPU to themselves, so with the probe it runs first.
        check = None
        if not args.timing_probe:
            pool = ThreadPoolExecutor(1)
            check = pool.submit(service_check)
            pool.shutdown(wait=False)
        else:
            with timed("1_service_honest_kernel"):
                _budget(t_all, args.budget_s)
                summary["service_check"] = service_check()
                print("  ", summary["service_check"])
                probe = TimingProbe(SandboxReward(SandboxReward.Config(), tasks, EvalClient(service.url, retries=3)),
                                    tasks[0].name, render_files(read_files(pairs[0][1])))
                probe.idle(3)
                print("   idle timings (ms):", probe.idle_ms)

        with timed("2_record_honest_trajectories"):
            _budget(t_all, args.budget_s)
            recs = record_episodes(pairs, out / "honest.jsonl", out / "episodes_honest",
                                   SessionConfig(max_turns=MAX_TURNS), workers=len(pairs))
            summary["honest_rewards"] = {rec["task"]["name"]: rec["reward"] for rec in recs}
            print("  ", summary["honest_rewards"])

        if check is not None:
            with timed("1_service_honest_kernel_wait"):
                summary["service_check"] = check.result()
                print("  ", summary["service_check"])

        with timed("3_tiny_model"):
            _budget(t_all, args.budget_s)
            episodes = list(read_episodes(out / "honest.jsonl"))
            corpus = [json.dumps(m) for e in episodes for m in e.messages]
            corpus += [json.dumps(e.tools) for e in episodes[:1]]
            corpus += [m["content"] for t in tasks for m in initial_messages(t, SessionConfig()) + single_turn_prompt(t)]
            corpus += [text for _, s in pairs for text in read_files(s).values()]
            size = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128) if args.small else \
                dict(hidden_size=256, num_hidden_layers=4, intermediate_size=768)
            tiny = make_tiny_model(out / "tiny", corpus, TinyModelConfig(vocab_size=4096, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32768, **size))

        with timed("4_single_turn_grpo"):
            _budget(t_all, args.budget_s)
            cfg = SingleTurnStage.Config(model=str(tiny), tasks=str(task_dir), num_generations=4,
                                         max_completion_length=32 if args.small else 256, sandbox=SandboxSettings(eval_url=service.url),
                                         optim=OptimConfig(lr=1e-5, max_steps=2, per_device_batch=4, grad_accum=1,
                                                           save_steps=1),
                                         run=RunConfig(out=str(out / "single_turn")))
            with probe.during("single_turn") if probe else contextlib.nullcontext():
                SingleTurnStage(cfg).run()
            summary["single_turn_metrics"] = _rows(out / "single_turn")

        with timed("5a_policy_before_rft"):
            _budget(t_all, args.budget_s)
            before = evaluate_policy(tiny, tasks, out / "eval_before", max_turns=2,
                                     max_new_tokens=16 if args.small else 256,
                                     trajectories=out / "eval_before.jsonl")
            curve.append(("before RFT", before))
            print("   rewards:", before)

        with timed("5b_rft"):
            _budget(t_all, args.budget_s)
            cfg = RFTStage.Config(model=str(tiny), trajectories=str(out / "honest.jsonl"), min_reward=args.min_reward,
                                  max_length=16384,
                                  optim=OptimConfig(lr=args.rft_lr, max_steps=args.rft_steps, per_device_batch=4,
                                                    grad_accum=1, save_steps=10_000, warmup_steps=10, bf16=False,
                                                    lr_scheduler="cosine",
                                                    logging_steps=max(1, min(10, args.rft_steps // 10))),
                                  run=RunConfig(out=str(out / "rft")))
            rft_final = RFTStage(cfg).run()
            summary["rft_loss"] = [r.get("loss") for r in _rows(out / "rft")][-3:]

        with timed("5c_policy_after_rft"):
            _budget(t_all, args.budget_s)
            after_rft = evaluate_policy(rft_final, tasks, out / "eval_rft", max_turns=MAX_TURNS,
                                        max_new_tokens=args.max_new_tokens, trajectories=out / "eval_rft.jsonl")
            curve.append(("after RFT", after_rft))
            summary.setdefault("episodes", {})["after_rft"] = _episode_facts(out / "eval_rft.jsonl")
            print("   rewards:", after_rft)

        with timed("5d_value_pretraining"):
            _budget(t_all, args.budget_s)
            mixed = out / "value_data.jsonl"
            mixed.write_text("".join((out / f).read_text() for f in
                                     ("honest.jsonl", "eval_before.jsonl", "eval_rft.jsonl")
                                     if (out / f).exists()))
            cfg = ValueStage.Config(model=str(rft_final), trajectories=str(mixed), max_length=16384,
                                    optim=OptimConfig(lr=1e-4, max_steps=4 if args.small else 40, per_device_batch=4,
                                                      grad_accum=1,
                                                      save_steps=10_000),
                                    run=RunConfig(out=str(out / "value")))
            ValueStage(cfg).run()
            rows = _rows(out / "value")
            summary["value"] = {"first_value_loss": rows[0].get("value_loss"), "last_value_loss": rows[-2].get("value_loss"),
                                "final_explained_variance": rows[-1].get("final_explained_variance")}
            print("  ", summary["value"])

        with timed("5e_agentic_grpo"):
            _budget(t_all, args.budget_s)
            cfg = AgenticStage.Config(model=str(rft_final), tasks=str(task_dir), num_generations=args.grpo_generations,
                                      max_completion_length=64 if args.small else 12288,
                                      max_tool_calling_iterations=2 if args.small else 10, temperature=args.grpo_temperature,
                                      session=SessionConfig(max_turns=MAX_TURNS), sandbox=SandboxSettings(eval_url=service.url),
                                      optim=OptimConfig(lr=args.grpo_lr, max_steps=args.grpo_steps, per_device_batch=args.grpo_generations,
                                                        grad_accum=1, save_steps=10_000, bf16=False),
                                      run=RunConfig(out=str(out / "agentic")))
            with probe.during("agentic") if probe else contextlib.nullcontext():
                grpo_final = AgenticStage(cfg).run()
            summary["agentic_metrics"] = _rows(out / "agentic")

        with timed("5f_policy_after_grpo"):
            _budget(t_all, args.budget_s)
            after_grpo = evaluate_policy(grpo_final, tasks, out / "eval_grpo", max_turns=MAX_TURNS,
                                         max_new_tokens=args.max_new_tokens, trajectories=out / "eval_grpo.jsonl")
            curve.append((f"after {args.grpo_steps} GRPO steps", after_grpo))
            summary.setdefault("episodes", {})["after_grpo"] = _episode_facts(out / "eval_grpo.jsonl")
            print("   rewards:", after_grpo)

    finally:
        service.stop()
        if probe:
            summary["timing_probe"] = probe.summary(args.service_gpu)
            print("timing probe:", json.dumps(summary["timing_probe"]))

    write_summary()
    print(json.dumps({k: summary.get(k) for k in ("reward_curve", "learned", "grpo_kept_it", "same_solutions_after_grpo",
                                                  "value", "wall_s", "timings_s")}, indent=1, default=str))
    print("errors in:", sorted(summary.get("errors", {})) or "none")
    return 1 if summary.get("errors") else 0


class ServiceProcess:
    """``cuda-agent train serve`` on one GPU, in a process of its own; ``url`` once it answers."""

    def __init__(self, gpu: int, cache: Path, log: Path):
        import socket
        import subprocess

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
        except Exception:  # noqa: BLE001 - a service that will not stop is killed
            self.proc.kill()
        self.log.close()


class TimingProbe:
    """One honest kernel timed through the evaluation service: a few times while nothing else
    runs, then back to back while a training stage runs (on another GPU, or on the same one)."""

    def __init__(self, reward, task: str, text: str):
        self.reward, self.task, self.text = reward, task, text
        self.idle_ms: list[float] = []
        self.training_ms: dict[str, list[float]] = {}

    def _one(self) -> float | None:
        r = self.reward.evaluate_text(self.task, self.text)
        return r.verdict.ms if r.verdict.verdict == "correct" else None

    def idle(self, n: int) -> None:
        self.idle_ms += [ms for ms in (self._one() for _ in range(n)) if ms]

    @contextlib.contextmanager
    def during(self, stage: str):
        stop = threading.Event()
        got = self.training_ms.setdefault(stage, [])

        def loop() -> None:
            while not stop.is_set():
                ms = self._one()
                if ms and not stop.is_set():  # an evaluation that ended after training did is not counted
                    got.append(ms)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(300)

    def summary(self, service_gpu: int) -> dict:
        import statistics

        during = [ms for v in self.training_ms.values() for ms in v]
        res = {"service_gpu": service_gpu, "training_gpu": 0, "idle_ms": self.idle_ms,
               "training_ms": self.training_ms}
        if self.idle_ms and during:
            idle = statistics.median(self.idle_ms)
            res.update(ratio_median=round(statistics.median(during) / idle, 4),
                       within_3pct=sum(abs(ms / idle - 1) <= 0.03 for ms in during), during_n=len(during))
        return res


def _budget(t_all: float, budget_s: float) -> None:
    if time.perf_counter() - t_all > budget_s:
        raise TimeoutError(f"skipped: past the {budget_s:.0f} s budget")


def _episode_facts(trajectories: Path) -> list[dict]:
    """Per evaluated episode: task, reward, the best solution's fingerprint and its speedups."""
    facts = []
    for line in trajectories.read_text().splitlines() if trajectories.exists() else []:
        rec = json.loads(line)
        best = rec.get("best") or {}
        facts.append({"task": rec["task"]["name"], "reward": rec["reward"], "turns": rec["turns"],
                      "ended_by": rec["ended_by"], "fingerprint": best.get("fingerprint"),
                      "speedup_vs_eager": best.get("speedup_vs_eager"),
                      "speedup_vs_compile": best.get("speedup_vs_compile")})
    return facts


def _rows(run_dir: Path) -> list[dict]:
    import csv

    if not (run_dir / "metrics.csv").exists():
        return []
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _plot(curve, rft_rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    xs = list(range(len(curve)))
    a1.plot(xs, [sum(r) / len(r) for _, r in curve], marker="o", label="mean reward")
    for i, (_, rs) in enumerate(curve):
        a1.scatter([i] * len(rs), rs, alpha=0.4, color="gray")
    a1.axhline(0, color="k", lw=0.5)
    a1.set_xticks(xs, [n for n, _ in curve])
    a1.set_ylabel("sandbox reward (paper: -1, 1, 2, 3)")
    a1.set_title("tiny model as a CUDA agent")
    a1.legend()
    rows = [r for r in rft_rows if r.get("loss")]
    a2.plot([int(r["step"]) for r in rows], [float(r["loss"]) for r in rows])
    a2.set_yscale("log")
    a2.set_xlabel("RFT step")
    a2.set_ylabel("SFT loss (assistant tokens)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
