"""Tasks -> the parquet that verl's ``RLHFDataset`` reads (``data.train_files``).

Columns: ``prompt`` (the agent's system + task messages; verl passes it to the loop as
``raw_prompt``), ``data_source`` (``cuda_agent``), ``agent_name`` (which registered agent loop
runs the row), ``extra_info`` (``task_name``, ``task_source``, ``index``), ``reward_model``
(``{"style": "rule", "ground_truth": ""}``; the reward comes from the sandbox).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...tasks import Task
from ..agent_env import SessionConfig, initial_messages
from ..data import single_turn_prompt
from .agent_loop import AGENT_NAME


def verl_rows(tasks: list[Task], mode: str = "agentic", session: SessionConfig | None = None) -> list[dict[str, Any]]:
    """``mode``: 'agentic' (the agent's prompt, our agent loop) or 'single_turn' (the single-turn
    prompt, verl's ``single_turn_agent`` and our ``compute_score``)."""
    rows = []
    for i, t in enumerate(tasks):
        prompt = initial_messages(t, session or SessionConfig()) if mode == "agentic" else single_turn_prompt(t)
        rows.append({"prompt": prompt, "data_source": "cuda_agent",
                     "agent_name": AGENT_NAME if mode == "agentic" else "single_turn_agent",
                     "extra_info": {"task_name": t.name, "task_source": t.source, "index": i},
                     "reward_model": {"style": "rule", "ground_truth": ""}})
    return rows


def write_parquet(rows: list[dict[str, Any]], out: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out
