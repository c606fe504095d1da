"""Solutions as text: parse a model's completion into workspace files, and write files to disk.

A single-turn completion names each file in a heading and gives it in a fenced block
(the prompt template, ``prompts/single_turn.md``, asks for exactly this)::

    ### model_new.py
    ```python
    ...
    ```
    ### kernels/swish.cu
    ```cuda
    ...
    ```

A completion with no headings but one ```python block defining ``ModelNew`` is taken as a
single-file (``load_inline``) solution. Only the paths a solution may have are accepted:
``model_new.py`` and ``kernels/**/<name>.{cu,cuh,h,hpp,cpp}``; anything else is dropped.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from ..sandbox import Solution, load_solution

SINGLE_FILE = "solution.py"
_KERNEL_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cpp")
_HEADED_BLOCK = re.compile(
    r"^#{1,6}[ \t]*(?:file:?[ \t]*)?`?(?P<path>[\w./-]+)`?[ \t]*\n+```[\w+-]*[ \t]*\n(?P<body>.*?)^```[ \t]*$",
    re.MULTILINE | re.DOTALL | re.IGNORECASE)
_PY_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def allowed_path(path: str) -> bool:
    """Whether ``path`` may be part of a workspace solution (relative, no '..')."""
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        return False
    if str(p) == "model_new.py":
        return True
    return len(p.parts) >= 2 and p.parts[0] == "kernels" and p.suffix in _KERNEL_SUFFIXES


def parse_completion(text: str) -> dict[str, str]:
    """Files named in ``text`` (relative path -> content); empty when it holds no solution."""
    files = {m["path"]: m["body"] for m in _HEADED_BLOCK.finditer(text) if allowed_path(m["path"])}
    if "model_new.py" in files:
        return files
    blocks = [m["body"] for m in _PY_BLOCK.finditer(text) if "class ModelNew" in m["body"]]
    if blocks:
        return {SINGLE_FILE: blocks[-1]}
    return {}


def render_files(files: dict[str, str]) -> str:
    """The inverse of :func:`parse_completion` for workspace files (used to build SFT targets)."""
    lang = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".h": "cpp", ".hpp": "cpp"}
    parts = []
    for path in sorted(files, key=lambda p: (p != "model_new.py", p)):
        body = files[path] if files[path].endswith("\n") else files[path] + "\n"
        parts.append(f"### {path}\n```{lang.get(PurePosixPath(path).suffix, '')}\n{body}```")
    return "\n\n".join(parts)


def read_files(solution_dir: str | Path) -> dict[str, str]:
    """The candidate files of a workspace directory (or a single ``.py`` file) as text."""
    sol = load_solution(solution_dir)
    if sol.kind == "file":
        return {SINGLE_FILE: sol.path.read_text()}
    return {sol.display(p): p.read_text() for p in sol.source_files()}


def write_solution(files: dict[str, str], root: str | Path) -> Solution:
    """Write ``files`` under ``root`` and return the sandbox's Solution for it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if set(files) == {SINGLE_FILE}:
        path = root / SINGLE_FILE
        path.write_text(files[SINGLE_FILE])
        return load_solution(path)
    for rel, text in files.items():
        if not allowed_path(rel):
            raise ValueError(f"{rel}: not a path a solution may have")
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return load_solution(root)
