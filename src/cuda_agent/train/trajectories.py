"""Agent trajectories as training data: read episodes, keep the good ones, clean them.

An :class:`Episode` is what training needs from one agent run: the conversation in the
OpenAI/TRL message format (``tool_calls[].function.arguments`` as dicts), the tool schemas the
model saw, the task, and the outcome (the final Verdict and its reward).

Reading goes through the agent package's trajectory reader (``cuda_agent.agent.trajectory``,
docs/agent.md: ``messages``, ``tools``, ``task``, ``reward``, ``best.verdict``); the records
:func:`write_episodes` writes carry the same fields plus ``format_version``, so both readers
take them. See docs/train.md, "Data".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .cleaning import CleanConfig, CleanStats, clean_messages, parse_arguments

FORMAT_VERSION = 1


@dataclass
class Episode:
    """One agent episode, ready for SFT or value data. Defaults mean failed."""

    task: str = ""
    """Task name."""
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    """OpenAI tool schemas (``{"type": "function", "function": {...}}``)."""
    reward: float = -1.0
    verdict: dict[str, Any] | None = None
    task_source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    @property
    def schemas(self) -> dict[str, dict[str, Any]]:
        return {(t.get("function") or t)["name"]: t for t in self.tools}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalize_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages -> TRL conversational: arguments as dicts (unparsable ones kept as the raw
    string, for cleaning to drop), ``content`` always a string, unknown keys dropped."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function") or c
                args = parse_arguments(fn.get("arguments"))
                call = {"type": "function", "function": {"name": fn.get("name", ""),
                                                         "arguments": args if args is not None else fn.get("arguments")}}
                if c.get("id"):
                    call["id"] = c["id"]
                calls.append(call)
            msg["tool_calls"] = calls
        if m["role"] == "tool":
            for k in ("name", "tool_call_id"):
                if m.get(k):
                    msg[k] = m[k]
        out.append(msg)
    return out


def episode_from_record(d: dict[str, Any]) -> Episode:
    """One JSON record (ours, or the agent's per-episode summary) -> Episode."""
    best = d.get("best") if isinstance(d.get("best"), dict) else {}
    verdict = d.get("verdict") or best.get("verdict")
    reward = d.get("reward")
    if reward is None and isinstance(verdict, dict):
        reward = verdict.get("reward")
    task = d.get("task")
    task_name = task.get("name") if isinstance(task, dict) else task
    return Episode(task=str(task_name or d.get("task_name") or ""), messages=normalize_messages(d.get("messages") or []),
                   tools=list(d.get("tools") or []), reward=float(reward if reward is not None else -1.0),
                   verdict=verdict, task_source=(task.get("source") if isinstance(task, dict) else d.get("task_source")),
                   meta=dict(d.get("meta") or {}))


def read_episodes(path: str | Path) -> Iterator[Episode]:
    """Episodes from a JSONL file or a directory of them (recursively ``*.jsonl``).
    Uses the agent package's reader when it has one."""
    path = Path(path)
    files = sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
    reader = _agent_reader()
    for f in files:
        if reader is not None:
            for rec in reader(f):
                yield episode_from_record(rec)
            continue
        with open(f) as fh:
            for line in fh:
                if line.strip():
                    rec = json.loads(line)
                    if "messages" in rec:
                        yield episode_from_record(rec)


def write_episodes(episodes: Iterable[Episode], path: str | Path) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w") as f:
        for ep in episodes:
            f.write(json.dumps(ep.to_dict()) + "\n")
            n += 1
    return n


def select_for_rft(episodes: Iterable[Episode], min_reward: float = 1.0, config: CleanConfig | None = None,
                   require_submit: bool = False) -> tuple[list[Episode], CleanStats]:
    """The paper's rejection sampling: keep episodes with reward >= ``min_reward`` (positive),
    clean each, and return them with the summed cleaning statistics."""
    total = CleanStats()
    kept = []
    for ep in episodes:
        if ep.reward < min_reward:
            continue
        cfg = config or CleanConfig()
        if not cfg.schemas:
            cfg = CleanConfig(**{**vars(cfg), "schemas": ep.schemas})
        messages, stats = clean_messages(ep.messages, cfg)
        total.add(stats)
        if require_submit and not stats.submitted:
            continue
        kept.append(Episode(**{**ep.to_dict(), "messages": messages, "meta": {**ep.meta, "cleaning": vars(stats)}}))
    return kept, total


def _agent_reader():
    """The agent package's trajectory reader (``cuda_agent.agent.trajectory.load_jsonl``: checks the
    format version), when the agent package is importable."""
    try:
        from ..agent.trajectory import load_jsonl
    except ImportError:
        return None
    return load_jsonl
