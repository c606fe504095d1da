"""Fitting the conversation into the model's context window.

The loop keeps every message (the trajectory records them all); what is *sent* is a view:

1. under the budget: everything, unchanged;
2. over it: tool results and user messages older than the last ``keep_last_turns`` turns are
   cut to ``old_output_chars`` (head and tail kept);
3. still over: the oldest turns are dropped whole (an assistant message with its tool results,
   so no tool result loses its call), and a short mechanical summary of what they did (calls,
   files written, verdicts) is appended to the task message;
4. still over: the longest remaining messages are cut hard.

The system prompt and the task message are always sent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .config import ContextConfig
from .tools import truncate

VERDICT_RX = re.compile(r'"verdict":\s*"(\w+)"')


@dataclass
class ContextInfo:
    tokens: int = 0
    """Estimated tokens of the view sent."""
    trimmed: int = 0
    """Old messages cut to old_output_chars."""
    dropped_turns: int = 0


def estimate_tokens(messages: list[dict[str, Any]], chars_per_token: float) -> int:
    chars = 0
    for m in messages:
        chars += len(m.get("content") or "") + 16
        if m.get("tool_calls"):
            chars += len(json.dumps(m["tool_calls"], ensure_ascii=False))
    return int(chars / chars_per_token)


def _turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group messages after the task into turns: an assistant message and what answered it."""
    turns: list[list[dict[str, Any]]] = []
    for m in messages:
        if m["role"] == "assistant" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


def summarize_turns(turns: list[list[dict[str, Any]]], max_lines: int = 40) -> str:
    lines = []
    for turn in turns:
        parts = []
        results = {m.get("tool_call_id"): m.get("content") or "" for m in turn if m["role"] == "tool"}
        for m in turn:
            for call in m.get("tool_calls") or []:
                fn = call["function"]
                args = fn.get("arguments") if isinstance(fn.get("arguments"), dict) else {}
                what = args.get("path") or (args.get("command") or "")[:60] or ""
                text = f"{fn['name']} {what}".strip()
                found = VERDICT_RX.search(results.get(call.get("id"), ""))
                if found:
                    text += f" -> {found.group(1)}"
                elif fn["name"] == "compile":
                    res = results.get(call.get("id"), "")
                    text += " -> build ok" if "build ok" in res else " -> build failed" if "build failed" in res else ""
                parts.append(text)
        if parts:
            lines.append("; ".join(parts))
    if len(lines) > max_lines:
        lines = lines[: max_lines // 2] + [f"... {len(lines) - max_lines} more turns ..."] + lines[-max_lines // 2:]
    return "\n".join(f"- {line}" for line in lines)


def fit_context(messages: list[dict[str, Any]], cfg: ContextConfig, context_tokens: int | None = None,
                extra_note: str = "") -> tuple[list[dict[str, Any]], ContextInfo]:
    """The view of ``messages`` to send (see module docstring) and what was done to it."""
    window = context_tokens or cfg.context_tokens
    budget = max(1024, window - cfg.reserve_tokens)
    cpt = cfg.chars_per_token
    info = ContextInfo(tokens=estimate_tokens(messages, cpt))
    if info.tokens <= budget or len(messages) <= 2:
        return messages, info
    head, turns = messages[:2], _turns(messages[2:])
    keep = max(1, cfg.keep_last_turns)
    old, recent = turns[:-keep], turns[-keep:]
    trimmed_old = []
    for turn in old:
        new_turn = []
        for m in turn:
            content = m.get("content") or ""
            if m["role"] in ("tool", "user") and len(content) > cfg.old_output_chars:
                m = {**m, "content": truncate(content, cfg.old_output_chars)}
                info.trimmed += 1
            new_turn.append(m)
        trimmed_old.append(new_turn)
    dropped: list[list[dict[str, Any]]] = []

    def view() -> list[dict[str, Any]]:
        task = dict(head[1])
        if dropped:
            task["content"] = (f"{task.get('content') or ''}\n\n[Context note: the {len(dropped)} oldest turns were "
                               "dropped to fit the context window; the workspace still holds every file written. "
                               f"What they did:\n{summarize_turns(dropped)}\n{extra_note}]")
        return [head[0], task] + [m for turn in trimmed_old + recent for m in turn]

    current = view()
    while estimate_tokens(current, cpt) > budget and trimmed_old:
        dropped.append(trimmed_old.pop(0))
        current = view()
    info.dropped_turns = len(dropped)
    # last resort: cut the longest messages (never the system prompt) until the view fits
    while estimate_tokens(current, cpt) > budget:
        idx = max(range(1, len(current)), key=lambda i: len(current[i].get("content") or ""))
        content = current[idx].get("content") or ""
        if len(content) < 2000:
            break
        current[idx] = {**current[idx], "content": truncate(content, len(content) // 2)}
        info.trimmed += 1
    info.tokens = estimate_tokens(current, cpt)
    return current, info
