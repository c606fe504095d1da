"""Prompt templates of the training stages (text files, ``{{ name }}`` holes; rendering fails
loudly on a missing or unused value, like the agent's templates)."""

from __future__ import annotations

import re
from pathlib import Path

PROMPT_DIR = Path(__file__).resolve().parent
_HOLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def render(name: str, **values: object) -> str:
    path = PROMPT_DIR / name
    if not path.is_file():
        raise KeyError(f"no prompt template {name!r} in {PROMPT_DIR}")
    text = path.read_text()
    wanted = set(_HOLE.findall(text))
    missing, unused = sorted(wanted - values.keys()), sorted(values.keys() - wanted)
    if missing or unused:
        raise KeyError(f"{name}: missing values {missing}, unused values {unused}")
    return _HOLE.sub(lambda m: str(values[m.group(1)]), text)
