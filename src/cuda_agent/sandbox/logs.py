"""Trim compiler and runtime logs to what a reader (human or LLM) needs, file:line kept."""

from __future__ import annotations

import re

MAX_LOG_CHARS = 4000
_ERROR_LINE = re.compile(r"\berror\b|\bError\b|undefined reference|undefined symbol|fatal", re.I)
_NOISE = re.compile(r"^\s*(?:In file included from|from /|from \S+:\d+[:,]|\d+ errors? detected|"
                    r"compilation terminated)")


def shorten_paths(text: str, roots: dict[str, str]) -> str:
    """Replace long absolute directories with short names (e.g. build dir -> '')."""
    for long, short in sorted(roots.items(), key=lambda kv: -len(kv[0])):
        if long:
            text = text.replace(long.rstrip("/") + "/", short)
    return text


def trim_compiler_log(text: str, limit: int = MAX_LOG_CHARS, context: int = 2) -> str:
    """Keep error lines with a little context; drop include chains and warnings noise."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not _NOISE.match(ln)]
    keep: set[int] = set()
    for i, ln in enumerate(lines):
        if _ERROR_LINE.search(ln):
            keep.update(range(max(0, i - 1), min(len(lines), i + context + 1)))
    chosen = [lines[i] for i in sorted(keep)] if keep else lines[-40:]
    return _cap("\n".join(chosen), limit)


def trim_traceback(text: str, limit: int = MAX_LOG_CHARS) -> str:
    """Keep a Python traceback's last frames and its message; drop torch-internal frames."""
    lines = text.rstrip().splitlines()
    out: list[str] = []
    skip = False
    for ln in lines:
        if ln.startswith('  File "') and (re.search(r"/(?:site|dist)-packages/torch/", ln) or "/cuda_agent/sandbox/" in ln):
            skip = True
            continue
        if skip and ln.startswith("    "):
            continue
        skip = False
        out.append(ln)
    return _cap("\n".join(out), limit)


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit // 3]
    tail = text[-(limit - len(head) - 40):]
    return f"{head}\n... [{len(text) - len(head) - len(tail)} chars trimmed] ...\n{tail}"
