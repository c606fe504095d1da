"""Trajectories: one JSON record per episode (format in docs/agent.md).

The record's ``messages`` (OpenAI chat format: assistant ``tool_calls`` with ``arguments`` as an
object, ``role: tool`` results) and ``tools`` (the function schemas) columns are TRL's
conversational format with tool calling as they stand, so a trajectories JSONL loads with
``datasets.load_dataset("json", ...)`` and trains with ``trl.SFTTrainer``. :func:`to_trl`
strips a record to just those two columns (and can drop failed episodes or calls).

While an episode runs, ``<run_dir>/episode.json`` is rewritten after every turn (a killed run
loses at most one turn); at the end the record is appended to the trajectories JSONL.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

FORMAT_VERSION = 1
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")


class TrajectoryError(ValueError):
    """A record that is not a trajectory of a known format version."""


def write_json_atomic(path: str | Path, record: dict[str, Any]) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, ensure_ascii=False))
    os.replace(tmp, path)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def check_record(record: dict[str, Any], origin: str = "<record>") -> dict[str, Any]:
    version = record.get("format_version")
    if version != FORMAT_VERSION:
        raise TrajectoryError(f"{origin}: trajectory format_version {version!r}; this version reads {FORMAT_VERSION}")
    for key in ("messages", "tools", "task", "reward"):
        if key not in record:
            raise TrajectoryError(f"{origin}: not a trajectory (no {key!r})")
    return record


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    records = []
    for i, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if line.strip():
            records.append(check_record(json.loads(line), f"{path}:{i}"))
    return records


def _clean_message(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: m[k] for k in MESSAGE_KEYS if k in m and m[k] is not None}
    out.setdefault("content", "")
    if "tool_calls" in out:
        calls = []
        for c in out["tool_calls"]:
            args = c["function"].get("arguments")
            if isinstance(args, str):  # recorded raw because the model's JSON was broken
                try:
                    parsed = json.loads(args, strict=False)
                    args = parsed if isinstance(parsed, dict) else args
                except json.JSONDecodeError:
                    pass
            calls.append({"id": c.get("id"), "type": "function",
                          "function": {"name": c["function"]["name"], "arguments": args}})
        out["tool_calls"] = calls
    return out


def to_trl(record: dict[str, Any]) -> dict[str, Any]:
    """One record as a TRL conversational SFT example with tool calling: {"messages", "tools"}."""
    check_record(record)
    return {"messages": [_clean_message(m) for m in record["messages"]], "tools": record["tools"]}


def to_trl_dataset(records: Iterable[dict[str, Any]], min_reward: float | None = None) -> list[dict[str, Any]]:
    """TRL examples from records, optionally only episodes whose reward is at least ``min_reward``
    (e.g. 1: correct solutions; 3: faster than eager and torch.compile)."""
    return [to_trl(r) for r in records if min_reward is None or r["reward"] >= min_reward]


def write_trl_jsonl(records: Iterable[dict[str, Any]], path: str | Path, min_reward: float | None = None) -> int:
    rows = to_trl_dataset(records, min_reward)
    Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return len(rows)


__all__ = ["FORMAT_VERSION", "TrajectoryError", "write_json_atomic", "append_jsonl", "check_record", "load_jsonl",
           "to_trl", "to_trl_dataset", "write_trl_jsonl"]
