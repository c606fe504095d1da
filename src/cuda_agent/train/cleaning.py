"""Trajectory cleaning for rejection fine-tuning (the paper's stage 2).

The paper keeps positive-reward agent trajectories and cleans them before SFT: redundant loops
and invalid or hallucinated tool calls go, so the actor learns the useful path, not the
stumbling. Three rules, applied in this order to an OpenAI/TRL message list:

1. **truncate after submit**: everything after the first assistant turn that calls ``submit``
   (and that call's result) is cut;
2. **drop invalid calls**: a call to an unknown tool, with arguments that are not a JSON
   object, or that break the tool's schema (missing required / unknown argument) is removed
   with its result; so are ``<tool_response>`` blocks the model wrote itself (hallucinated
   observations) and stray ``<tool_call>`` text that was never parsed;
3. **dedupe repeated calls**: a read-only call (``read_file``, ``glob``, ``grep``, ``compile``,
   ``verify``, ``profile``) identical to one made since the last state-changing call, and a
   state-changing call (``write_file``, ``edit_file``, ``bash``) identical to the call just
   before it, are removed with their results.

An assistant turn left with no tool call (all dropped) is removed too: its text talked about
the calls. Messages are never rewritten otherwise.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SUBMIT = "submit"
MUTATING_TOOLS = frozenset({"write_file", "edit_file", "bash"})
_HALLUCINATED = re.compile(r"\s*<tool_response>.*?(</tool_response>|\Z)", re.DOTALL)
_STRAY_CALL = re.compile(r"\s*<tool_call>.*?(</tool_call>|\Z)", re.DOTALL)


@dataclass
class CleanStats:
    """What cleaning removed from one trajectory."""

    unknown_calls: int = 0
    invalid_calls: int = 0
    duplicate_calls: int = 0
    hallucinated_blocks: int = 0
    messages_after_submit: int = 0
    dropped_turns: int = 0
    submitted: bool = False

    def add(self, other: "CleanStats") -> None:
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v if not isinstance(v, bool) else getattr(self, k) or v)


@dataclass
class CleanConfig:
    """Which rules run; ``schemas`` (tool name -> OpenAI tool schema) define known tools."""

    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    truncate_after_submit: bool = True
    drop_invalid: bool = True
    dedupe: bool = True
    strip_hallucinated: bool = True


def parse_arguments(arguments: Any) -> dict[str, Any] | None:
    """Tool-call arguments as a dict (OpenAI sends a JSON string, TRL a dict); None if not an object."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, str):
        try:
            value = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None
    return None


def call_name(call: Mapping[str, Any]) -> str:
    return str((call.get("function") or call).get("name", ""))


def call_key(call: Mapping[str, Any]) -> str:
    """Identity of a call: name plus canonical JSON of its arguments."""
    fn = call.get("function") or call
    args = parse_arguments(fn.get("arguments"))
    return call_name(call) + "\0" + json.dumps(args, sort_keys=True)


def invalid_reason(call: Mapping[str, Any], schemas: Mapping[str, dict[str, Any]]) -> str | None:
    """Why ``call`` is not a valid call of a known tool, or None when it is."""
    name = call_name(call)
    if name not in schemas:
        return "unknown"
    args = parse_arguments((call.get("function") or call).get("arguments"))
    if args is None:
        return "invalid"
    params = (schemas[name].get("function") or schemas[name]).get("parameters") or {}
    props = params.get("properties") or {}
    if any(k not in args for k in params.get("required") or []) or any(k not in props for k in args):
        return "invalid"
    return None


def split_turns(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Group messages: each assistant message starts a group that holds the tool results after it."""
    groups: list[list[dict[str, Any]]] = []
    for m in messages:
        if m.get("role") == "tool" and groups and groups[-1][0].get("role") == "assistant":
            groups[-1].append(m)
        else:
            groups.append([m])
    return groups


def _results_for(group: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """The tool result of each call of an assistant group (by tool_call_id, else by position)."""
    calls = group[0].get("tool_calls") or []
    results = group[1:]
    by_id = {r.get("tool_call_id"): r for r in results if r.get("tool_call_id")}
    out: list[dict[str, Any] | None] = []
    for i, c in enumerate(calls):
        out.append(by_id.get(c.get("id")) if c.get("id") in by_id else (results[i] if i < len(results) else None))
    return out


def clean_messages(messages: Iterable[dict[str, Any]], config: CleanConfig) -> tuple[list[dict[str, Any]], CleanStats]:
    """Apply the three rules; returns (new messages, what was removed). Input is not modified."""
    stats = CleanStats()
    out: list[dict[str, Any]] = []
    seen_pure: set[str] = set()
    last_key: str | None = None
    groups = split_turns(copy.deepcopy(list(messages)))
    for gi, group in enumerate(groups):
        head = group[0]
        if head.get("role") != "assistant":
            out.extend(group)
            continue
        if config.strip_hallucinated and isinstance(head.get("content"), str):
            text = head["content"]
            n = len(_HALLUCINATED.findall(text)) + (len(_STRAY_CALL.findall(text)) if head.get("tool_calls") else 0)
            if n:
                text = _HALLUCINATED.sub("", text)
                if head.get("tool_calls"):
                    text = _STRAY_CALL.sub("", text)
                head["content"] = text.strip()
                stats.hallucinated_blocks += n
        calls = head.get("tool_calls") or []
        if not calls:
            out.extend(group)
            continue
        kept_calls, kept_results, submitted = [], [], False
        for call, result in zip(calls, _results_for(group)):
            reason = invalid_reason(call, config.schemas) if config.drop_invalid else None
            if reason == "unknown":
                stats.unknown_calls += 1
                continue
            if reason == "invalid":
                stats.invalid_calls += 1
                continue
            key, name = call_key(call), call_name(call)
            if config.dedupe:
                if name in MUTATING_TOOLS:
                    if key == last_key:
                        stats.duplicate_calls += 1
                        continue
                    seen_pure.clear()
                elif key in seen_pure:
                    stats.duplicate_calls += 1
                    continue
                else:
                    seen_pure.add(key)
            last_key = key
            kept_calls.append(call)
            if result is not None:
                kept_results.append(result)
            if name == SUBMIT:
                submitted = True
                if config.truncate_after_submit:
                    break
        if not kept_calls:
            stats.dropped_turns += 1
            continue
        head["tool_calls"] = kept_calls
        out.append(head)
        out.extend(kept_results)
        if submitted:
            stats.submitted = True
            if config.truncate_after_submit:
                stats.messages_after_submit = sum(len(g) for g in groups[gi + 1:])
                break
    return out, stats
