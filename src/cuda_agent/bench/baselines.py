"""Carry eager / torch.compile timings from one machine to another, per GPU model.

The sandbox keeps baselines in ``<cache>/baselines.sqlite``, keyed by task hash x GPU x torch x
precision x timing version. The file format is :meth:`BaselineStore.export_json`'s: a JSON list
of baseline records. A baseline only matches on a GPU of the same name with the same torch.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from .sources import BenchError


def _store(cache_dir: Path):
    from ..sandbox.baselines import BaselineStore

    return BaselineStore(Path(cache_dir) / "baselines.sqlite")


def export_baselines(cache_dir: Path, path: Path, gpu: str | None) -> Counter:
    """Write the baselines of GPU model ``gpu`` (all of them for None) to ``path``; count per GPU."""
    rows = [b for b in _store(cache_dir).all() if gpu is None or b.gpu == gpu]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps([asdict(b) for b in rows], indent=1))
    return Counter(b.gpu for b in rows)


def import_baselines(cache_dir: Path, path: Path) -> Counter:
    """Add the baselines in ``path`` to this host's cache; count per GPU. BenchError on a bad file."""
    path = Path(path)
    if not path.is_file():
        raise BenchError(f"--import-baselines {path}: no such file")
    try:
        rows = json.loads(path.read_text())
        if not isinstance(rows, list):
            raise TypeError("expected a JSON list of baseline records")
        gpus = Counter(r["gpu"] for r in rows)
        _store(cache_dir).import_json(path)
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        raise BenchError(f"--import-baselines {path}: not a baselines file ({type(e).__name__}: {e})") from None
    return gpus


def describe(counts: Counter) -> str:
    return ", ".join(f"{n} for {gpu}" for gpu, n in counts.most_common()) or "none"
