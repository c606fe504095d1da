"""Replay recorded assistant turns: for tests and benchmarks that script only the LLM.

A replay file is either

* a trajectory JSONL written by the agent (the assistant messages of its first record, or of
  record ``index``), or
* a JSON object ``{"steps": [...]}`` where each step is an assistant turn: a string (raw model
  text, parsed like a text-format reply, so replays can exercise the parser) or
  ``{"content": "...", "tool_calls": [{"name": "...", "arguments": {...}}]}``. Arguments may
  also be a string, replayed as the raw (possibly malformed) JSON a model produced.

When the steps run out the backend raises :class:`ReplayExhausted`, which ends the episode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import ModelReply, ReplayExhausted
from .toolcall_text import make_call, parse_reply


@dataclass
class ReplayConfig:
    path: str = ""
    """Replay file (see module docstring)."""
    index: int = 0
    """Which record of a trajectory JSONL to replay."""
    steps: list[Any] | None = None
    """Steps given directly (instead of a file)."""


def load_steps(path: str | Path, index: int = 0) -> list[Any]:
    path = Path(path)
    text = path.read_text()
    if path.suffix == ".jsonl":
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        messages = records[index]["messages"]
        return [{"content": m.get("content") or "", "tool_calls": [
            {"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in m.get("tool_calls") or []]} for m in messages if m["role"] == "assistant"]
    data = json.loads(text)
    return data["steps"] if isinstance(data, dict) else data


class ReplayBackend:
    Config = ReplayConfig

    def __init__(self, config: ReplayConfig):
        self.config = config
        self.steps = list(config.steps) if config.steps is not None else load_steps(config.path, config.index)
        self.name = f"replay:{Path(config.path).name or 'inline'}"
        self.context_tokens = None
        self.position = 0

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        if self.position >= len(self.steps):
            raise ReplayExhausted(f"the replay has no turn left after {len(self.steps)} turns")
        step = self.steps[self.position]
        self.position += 1
        if isinstance(step, str):
            return parse_reply(step)
        calls = [make_call(c.get("name", ""), c.get("arguments", {}), c.get("id")) for c in step.get("tool_calls") or []]
        return ModelReply(content=step.get("content") or "", tool_calls=calls)
