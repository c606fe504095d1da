"""Run logs: every stage writes ``metrics.jsonl`` and ``metrics.csv`` in its run directory, a
TensorBoard event file when ``torch.utils.tensorboard`` works, and ``metrics.png`` (matplotlib,
Agg) re-drawn as it goes.

Run directory layout (written by every stage)::

    <out>/config.json         the stage's Config, as run
    <out>/metrics.jsonl       one JSON object per logged step (appended; a resumed run appends)
    <out>/metrics.csv         the same rows as a table (rewritten when a new column appears)
    <out>/metrics.png         reward / pass rate / loss / KL or entropy / value metrics vs step
    <out>/tb/                 TensorBoard events (when tensorboard is installed)
    <out>/checkpoint-<step>/  HF Trainer checkpoints (resume: run the same command again)
    <out>/final/              the model to hand to the next stage
    <out>/rollouts.jsonl      per-sample verdicts and rewards (stages that call the sandbox)

Names are shared across stages: ``reward_mean``, ``reward_std``, ``reward_frac_<r>``,
``pass_rate``, ``loss``, ``kl``, ``entropy``, ``value_loss``, ``explained_variance``.
"""

from __future__ import annotations

import csv
import json
import math
import threading
from pathlib import Path
from typing import Any

PLOT_GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("reward", ("reward_mean", "reward")),
    ("pass rate", ("pass_rate",)),
    ("loss", ("loss", "value_loss")),
    ("KL / entropy", ("kl", "entropy")),
    ("explained variance", ("explained_variance",)),
]

# TRL / transformers log names -> ours (anything else is kept under its own name, '/' -> '_')
TRAINER_NAMES = {"reward": "reward_mean", "reward_std": "reward_std", "kl": "kl", "entropy": "entropy",
                 "loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm"}


class RunLog:
    """Append-only metrics for one run directory; safe to call from several threads."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True, plot_every: int = 1):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "metrics.jsonl"
        self.csv = self.dir / "metrics.csv"
        self.png = self.dir / "metrics.png"
        self.plot_every = plot_every
        self._lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        if self.jsonl.exists():  # a resumed run keeps its history
            self.rows = [json.loads(line) for line in self.jsonl.read_text().splitlines() if line.strip()]
        self._columns: list[str] = _columns(self.rows)
        self._tb = _tensorboard(self.dir / "tb") if tensorboard else None

    def log(self, step: int, **metrics: float) -> None:
        row = {"step": int(step), **{k: _num(v) for k, v in metrics.items() if _num(v) is not None}}
        with self._lock:
            self.rows.append(row)
            with open(self.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
            new_cols = [k for k in row if k not in self._columns]
            if new_cols or not self.csv.exists():
                self._columns += new_cols
                self._rewrite_csv()
            else:
                with open(self.csv, "a", newline="") as f:
                    csv.DictWriter(f, self._columns).writerow(row)
            if self._tb is not None:
                for k, v in row.items():
                    if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                        self._tb.add_scalar(k, v, int(step))
                self._tb.flush()
            if self.plot_every and len(self.rows) % self.plot_every == 0:
                self.plot()

    def last(self, key: str) -> float | None:
        for row in reversed(self.rows):
            if key in row:
                return row[key]
        return None

    def series(self, key: str) -> tuple[list[int], list[float]]:
        pts = [(r["step"], r[key]) for r in self.rows if key in r]
        return [p[0] for p in pts], [p[1] for p in pts]

    def plot(self, path: str | Path | None = None, title: str | None = None) -> Path | None:
        """Draw every group that has data, one panel each. Returns the PNG path, or None
        where matplotlib is missing."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        groups = [(name, [k for k in keys if self.series(k)[0]]) for name, keys in PLOT_GROUPS]
        groups = [(n, ks) for n, ks in groups if ks]
        if not groups:
            return None
        fig, axes = plt.subplots(len(groups), 1, figsize=(7, 2.4 * len(groups)), squeeze=False)
        for ax, (name, keys) in zip(axes[:, 0], groups):
            for k in keys:
                xs, ys = self.series(k)
                ax.plot(xs, ys, marker="o", markersize=3, label=k)
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
            ax.legend(loc="best", fontsize=8)
        axes[-1, 0].set_xlabel("step")
        fig.suptitle(title or self.dir.name)
        fig.tight_layout()
        out = Path(path) if path else self.png
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return out

    def close(self) -> None:
        self.plot()
        if self._tb is not None:
            self._tb.close()

    def _rewrite_csv(self) -> None:
        with open(self.csv, "w", newline="") as f:
            w = csv.DictWriter(f, self._columns)
            w.writeheader()
            w.writerows(self.rows)


def trainer_callback(log: RunLog, extra: dict | None = None):
    """A ``transformers.TrainerCallback`` that copies the trainer's logs into ``log`` under our
    names (``reward`` -> ``reward_mean``; ``rewards/x/mean`` -> ``rewards_x_mean``).
    ``extra`` is a dict the stage fills between logs (e.g. the sandbox reward's pass rate); it
    is merged into the next row and cleared."""
    from transformers import TrainerCallback

    class _RunLogCallback(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "train_runtime" in logs or not state.is_world_process_zero:
                return
            row = {TRAINER_NAMES.get(k, k.replace("/", "_")): v for k, v in logs.items()}
            if extra:
                row.update(extra)
                extra.clear()
            log.log(state.global_step, **row)

        def on_train_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                log.plot()

    return _RunLogCallback()


def _num(v: Any) -> float | int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return v
    if hasattr(v, "item"):
        return v.item()
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _columns(rows: list[dict]) -> list[str]:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    return cols or ["step"]


def _tensorboard(path: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception:  # noqa: BLE001 - tensorboard missing or broken: CSV and PNG still work
        return None
    return SummaryWriter(str(path))
