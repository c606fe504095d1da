"""Data plumbing: tasks -> prompts, trajectories -> SFT rows and value rows.

Rows are plain dicts (a ``datasets.Dataset`` is built from them only inside a stage):

* single-turn prompt row: ``{"prompt": [system, user], "task_name", "task_source"}`` (TRL's
  conversational prompt format; the extra columns reach the reward function);
* SFT row: ``{"messages": [...], "tools": [...]}`` (TRL conversational with tools; the loss is
  masked to assistant turns, so tool output is never a target);
* value row: ``{"messages": [...], "tools": [...], "value_target": r}``: every actor token of
  the conversation is a state whose target is the episode's outcome reward (the return at
  gamma = 1 with a sparse final reward, as verl's GAE computes it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..tasks import Task, load_task
from .prompts import render
from .trajectories import Episode


def load_tasks(source: str | Path, limit: int | None = None) -> list[Task]:
    """Tasks from a ``.py`` file, a directory of task files, or a dataset (``.parquet``/``.jsonl``
    from ``cuda-agent synth`` or Ops-6K)."""
    from ..tasks import iter_tasks
    from ..tasks.ops_dataset import iter_dataset

    source = Path(source)
    if source.is_dir():
        tasks = list(iter_tasks(source))
    elif source.suffix == ".py":
        tasks = [load_task(source, validate=False)]
    else:
        tasks = list(iter_dataset(source, limit=limit))
    return tasks[:limit] if limit is not None else tasks


def single_turn_prompt(task: Task) -> list[dict[str, str]]:
    """The single-turn RL prompt (``prompts/single_turn*.md``): system + user messages."""
    return [{"role": "system", "content": render("single_turn_system.md").strip()},
            {"role": "user", "content": render("single_turn.md", task_name=task.name,
                                               task_source=task.source.strip())}]


def prompt_rows(tasks: Iterable[Task]) -> list[dict[str, Any]]:
    return [{"prompt": single_turn_prompt(t), "task_name": t.name, "task_source": t.source} for t in tasks]


def sft_rows(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """Cleaned episodes -> TRL conversational rows with their tool schemas."""
    return [{"messages": ep.messages, "tools": ep.tools} for ep in episodes if ep.messages]


def value_rows(episodes: Iterable[Episode]) -> list[dict[str, Any]]:
    """Episodes (all of them: failures teach the critic as much as successes) -> value rows."""
    return [{"messages": ep.messages, "tools": ep.tools, "value_target": float(ep.reward)}
            for ep in episodes if ep.messages]


def assistant_token_mask(tokenizer, messages: list[dict[str, Any]], tools: list[dict] | None = None,
                         max_length: int | None = None) -> tuple[list[int], list[int]]:
    """``(input_ids, mask)`` of the rendered conversation, mask 1 on tokens the assistant wrote
    (its turns after the generation prompt), 0 on system/user/tool tokens.

    Found by rendering growing prefixes, which is exact for prefix-preserving chat templates
    (Qwen2.5/Qwen3, Llama 3; checked: a template that is not raises ValueError).
    """
    def ids(msgs, gen=False):
        out = tokenizer.apply_chat_template(msgs, tools=tools or None, tokenize=True, add_generation_prompt=gen,
                                            return_dict=False)
        return list(out["input_ids"] if isinstance(out, dict) else out)

    full = ids(messages)
    mask = [0] * len(full)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(ids(messages[:i], gen=True)) if i else 0
        end = len(ids(messages[: i + 1]))
        if full[:end] != ids(messages[: i + 1]):
            raise ValueError("the chat template is not prefix-preserving; cannot locate assistant tokens")
        for t in range(start, min(end, len(full))):
            mask[t] = 1
    if max_length is not None:
        full, mask = full[:max_length], mask[:max_length]
    return full, mask


def conversation_dataset(rows: list[dict[str, Any]]):
    """A ``datasets.Dataset`` of conversational rows that keeps every message and tool schema as
    written. Arrow would otherwise unify the nested dicts across rows (tool-call arguments of
    different tools, tool schemas with different properties) and fill the gaps with ``None``,
    so training would render ``"path": null`` into calls and schemas that inference never shows.
    Messages and tools are stored with the ``Json`` feature (datasets >= 4.8), as TRL's docs advise."""
    from datasets import Dataset, Features, List, Value

    try:
        from datasets import Json
    except ImportError:
        raise ImportError("tool-calling SFT data needs datasets >= 4.8 (the Json feature)") from None
    features = {"messages": List(Json()), "tools": List(Json())}
    for key in rows[0] if rows else []:
        if key not in features:
            features[key] = Value("float64") if isinstance(rows[0][key], float) else Json()
    return Dataset.from_list(rows, features=Features(features))
