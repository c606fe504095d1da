"""Scripted honest episodes and policy evaluation: data for RFT smoke runs and the "it learns" demo.

:func:`honest_steps` turns a known-good solution directory into the assistant turns an expert
agent would take (write each file, compile, verify, submit). :func:`record_episodes` replays
them through the real agent loop (``ReplayBackend``: only the LLM is scripted; the tools and
the sandbox run for real), appending agent-format trajectories. :func:`evaluate_policy` runs a
model with the agent's local transformers backend on tasks and returns each episode's reward.

On a host without a GPU the replayed ``verify`` cannot run, so recorded rewards are -1 there;
on a GPU host they are the sandbox's real verdicts. Record and evaluate with the same turn
budget: the agent's task prompt states it, and a model that memorized its trajectories only
reproduces them from the very prompt it was trained on (checked on CPU: after 200 RFT steps a
128-wide 2-layer model rewrites the honest swish files byte for byte, and the build hits the
cache).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..tasks import Task, load_task
from .agent_env import SessionConfig, agent_config
from .solution_io import read_files

DEMO_DATA = Path(__file__).resolve().parent / "demo_data"
"""The demo's (task, honest solution) pairs, shipped with the package: ``<name>/task.py`` and
``<name>/solution/`` (copies of examples/swish and tests/tasks + tests/solutions/honest_*; a test
keeps them equal)."""
DEMO_TASKS = ["swish", "row_sum", "linear_relu", "sin_loop"]
"""In the order the demo takes them. Whether "GRPO did not lower the reward" measures the policy
depends on each honest solution's reward being the same on every timing run. swish (1.4-1.9x
compile), row_sum (0.6-0.8x eager) and linear_relu (0.95-0.99x eager) are clear of the thresholds.
sin_loop is not: it measured 1.03-1.11x compile (H200, 2026-12-03 (B), two runs), so it scores 2 or
3. It replaced layer_norm, which scored 1 in one run and 3 in the next on the same files. Read the
demo with ``same_solutions_after_grpo``: where the files did not change, a reward that moved is
timing."""
SPARE_WORKERS = 2
"""Sandbox workers started ahead of need, as in ``cuda-agent optimize`` (a verify then skips worker start-up)."""


def honest_pairs(root: str | Path | None = None, names: Iterable[str] | None = None) -> list[tuple[Task, Path]]:
    """(task, honest solution directory) pairs from ``root`` (default: the packaged demo data), in
    :data:`DEMO_TASKS` order (or ``names``; default for another root: its subdirectories, sorted).
    A missing or empty root is an error, not an empty demo."""
    root = Path(root) if root is not None else DEMO_DATA
    if names is None:
        names = DEMO_TASKS if root == DEMO_DATA else sorted(d.name for d in root.iterdir() if d.is_dir()) \
            if root.is_dir() else []
    pairs = [(load_task(root / n / "task.py", name=n), root / n / "solution") for n in names
             if (root / n / "task.py").is_file()]
    if not pairs:
        raise FileNotFoundError(f"{root}: no <name>/task.py with <name>/solution/ (the demo's data)")
    return pairs


def honest_steps(solution_dir: str | Path, summary: str = "fused kernels") -> list[dict[str, Any]]:
    """Replay steps: one ``write_file`` turn per kernel file then ``model_new.py``, ``compile``,
    ``verify``, ``submit``."""
    files = read_files(solution_dir)
    order = sorted(files, key=lambda p: (p == "model_new.py", p))
    steps = [{"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": p, "content": files[p]}}]}
             for p in order]
    steps += [{"content": "", "tool_calls": [{"name": "compile", "arguments": {}}]},
              {"content": "", "tool_calls": [{"name": "verify", "arguments": {}}]},
              {"content": "", "tool_calls": [{"name": "submit", "arguments": {"summary": summary}}]}]
    return steps


def record_episodes(pairs: Iterable[tuple[Task, Path]], trajectories: str | Path, run_root: str | Path,
                    session: SessionConfig | None = None, prebuild: bool = True,
                    workers: int = 1) -> list[dict[str, Any]]:
    """Replay :func:`honest_steps` of each pair through the agent loop; append to ``trajectories``
    in the order of ``pairs``.

    ``prebuild`` builds each solution into the build cache first, so the recorded ``compile``
    says ``build ok (cached, ...)``: what a policy that rewrites the same files sees when it is
    evaluated later, when the cache holds them. A tiny model that memorized "build ok (12.3 s)"
    may not go on to ``verify`` after "build ok (cached, 0.0 s)" (H200, 2026-12-03 (A): without it 1 of
    4 tasks passed after RFT, with it 4 of 4). ``workers`` > 1 replays that many episodes at once
    (their sandbox timings still take the GPU one at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    from ..agent import run_episode
    from ..agent.backends.replay import ReplayBackend, ReplayConfig
    from ..agent.trajectory import append_jsonl

    cfg = _episode_config(session or SessionConfig(max_turns=20))

    def one(pair: tuple[Task, Path]) -> dict[str, Any]:
        task, sol = pair
        if prebuild:
            _prebuild(sol, cfg.sandbox)
        model = ReplayBackend(ReplayConfig(steps=honest_steps(sol)))
        return run_episode(task, model, cfg, run_dir=Path(run_root) / task.name)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        records = list(pool.map(one, list(pairs)))
    for rec in records:
        append_jsonl(trajectories, rec)
    return records


def _episode_config(session: SessionConfig):
    """The agent's config for recorded and evaluated episodes, with spare sandbox workers."""
    cfg = agent_config(session)
    cfg.sandbox.spare_workers = SPARE_WORKERS
    return cfg


def _prebuild(solution_dir: Path, config) -> None:
    from ..sandbox import build, load_solution

    build(load_solution(solution_dir), config)


def evaluate_policy(model: str | Path, tasks: Iterable[Task], run_root: str | Path, max_turns: int = 10,
                    max_new_tokens: int = 2048, trajectories: str | Path | None = None) -> list[float]:
    """Greedy episodes of ``model`` (the agent's local transformers backend); rewards per task."""
    from ..agent import run_episode
    from ..agent.backends.transformers_local import TransformersBackend, TransformersConfig

    backend = TransformersBackend(TransformersConfig(model=str(model), temperature=0.0, max_new_tokens=max_new_tokens,
                                                     local_files_only=True))
    cfg = _episode_config(SessionConfig(max_turns=max_turns))
    cfg.context.context_tokens = backend.context_tokens or cfg.context.context_tokens
    rewards = []
    for task in tasks:
        rec = run_episode(task, backend, cfg, run_dir=Path(run_root) / task.name, trajectories=trajectories)
        rewards.append(float(rec["reward"]))
    return rewards
