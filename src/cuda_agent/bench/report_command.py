"""``cuda-agent report RUN_DIR [--compare RUN_DIR2 ...] [--out DIR]``: Table 1 in markdown, a
self-contained HTML report with plots, and a per-task table. Exit 2 when a run directory is unreadable."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=Path, help="a run directory written by `cuda-agent bench`")
    p.add_argument("--compare", type=Path, nargs="+", default=[], metavar="RUN_DIR",
                   help="other run directories to compare against")
    p.add_argument("--out", type=Path, default=None, help="where to write the report (default RUN_DIR/report)")


def run(args: argparse.Namespace) -> int:
    from .report import load, table1_markdown, write_report

    names: set[str] = set()
    runs = []
    try:
        for path in [args.run, *args.compare]:
            name = Path(path).resolve().name
            while name in names:  # two runs called the same: keep them apart
                name += "'"
            names.add(name)
            runs.append(load(path, name))
    except FileNotFoundError as e:
        print(f"cuda-agent report: {e}", file=sys.stderr)
        return 2
    paths = write_report(runs, args.out or Path(args.run) / "report")
    print(table1_markdown(runs))
    print()
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0
