"""Progress a person can follow: one line per tool call and per verdict, with the best speedup so
far. Uses rich when it is importable (colors), plain lines on stderr otherwise."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Silent base: the loop calls these hooks; subclasses print."""

    def start(self, task: str, model: str, run_dir: str) -> None: ...

    def call(self, turn: int, name: str, summary: str, ok: bool, seconds: float) -> None: ...

    def note(self, turn: int, text: str) -> None: ...

    def verdict(self, turn: int, v: dict[str, Any], best: str) -> None: ...

    def end(self, record: dict[str, Any]) -> None: ...


class ConsoleProgress(Progress):
    def __init__(self, use_rich: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.console = None
        if use_rich is not False:
            try:
                from rich.console import Console
                self.console = Console(file=self.stream, highlight=False, soft_wrap=True)
            except ImportError:
                self.console = None

    def _print(self, text: str, style: str | None = None) -> None:
        if self.console is not None:
            self.console.print(text, style=style, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def start(self, task, model, run_dir):
        self._print(f"cuda-agent optimize: task {task}, model {model}, run dir {run_dir}", "bold")

    def call(self, turn, name, summary, ok, seconds):
        mark = "ok " if ok else "err"
        self._print(f"[turn {turn:3d}] {name:<10} {mark} {seconds:6.1f}s  {summary[:110]}", None if ok else "yellow")

    def note(self, turn, text):
        self._print(f"[turn {turn:3d}] {text[:140]}", "yellow")

    def verdict(self, turn, v, best):
        s_e, s_c = v.get("speedup_vs_eager"), v.get("speedup_vs_compile")
        speed = f" {s_e:.2f}x eager, {s_c:.2f}x compile" if s_e is not None and s_c is not None else ""
        reason = f" ({v['reasons'][0][:80]})" if v.get("reasons") and v.get("verdict") != "correct" else ""
        style = "green" if v.get("verdict") == "correct" else "red"
        self._print(f"[turn {turn:3d}] verdict: {v.get('verdict')}{speed}{reason} | {best}", style)

    def end(self, record):
        best = record.get("best") or {}
        speed = (f"{best.get('speedup_vs_compile') or 0:.2f}x vs compile, "
                 f"{best.get('speedup_vs_eager') or 0:.2f}x vs eager") if best else "no correct solution"
        t = record.get("timings", {})
        self._print(f"done ({record.get('ended_by')}) after {record.get('turns')} turns, {t.get('wall_s', 0):.0f} s: "
                    f"{speed}; reward {record.get('reward')}", "bold")
