"""The per-task workspace, in the paper's layout, and the run directory around it.

    <run_dir>/
      workspace/              the agent's working directory (bash runs here, HOME points here)
        SKILL.md              read-only: the protocol (templates/SKILL.md)
        model.py              read-only: the task, KernelBench format
        model_new.py          writable: ModelNew, starts as a starter copy of Model
        kernels/              writable: *.cu, *_binding.cpp, headers
      candidates/<hash>/      what was compiled, verified or profiled: model_new.py + kernels/ only
      best/                   the best verified solution so far (a copy of one candidate)

Read-only files are enforced twice: the file tools refuse to write them, and before every
compile, verify and profile their hashes are checked and the originals restored (bash can write
anything). The sandbox never reads them anyway: it gets the trusted in-memory Task and a
*snapshot* holding only ``model_new.py`` and ``kernels/``, so scratch files the agent leaves in
the workspace (tests, notes) are not part of the solution.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ..sandbox import Solution, load_solution
from ..tasks import Task
from .templating import render

SKILL_FILE = "SKILL.md"
TASK_FILE = "model.py"
MODEL_NEW = "model_new.py"
KERNELS = "kernels"
MAX_SOLUTION_FILE_BYTES = 2_000_000
STATE_KEY_FILE_BYTES = 256_000
STATE_KEY_READ_BYTES = 32_000_000
STATE_KEY_MAX_ENTRIES = 100_000
"""Bounds on what one :meth:`Workspace.state_key` reads: per file, in all, and entries listed."""


class PathError(ValueError):
    """A path the agent may not use (outside the workspace, or read-only for writing)."""


@dataclass
class Workspace:
    root: Path
    read_only: dict[str, str]
    """workspace-relative name -> original text."""

    # ------------------------------------------------------------------ creation
    @classmethod
    def create(cls, root: Path, task: Task, target_speedup: float | None, precision: str) -> "Workspace":
        root = Path(root).resolve()
        root.mkdir(parents=True, exist_ok=True)
        (root / KERNELS).mkdir(exist_ok=True)
        target = f"{target_speedup:.2f}" if target_speedup else "1.05"
        originals = {
            SKILL_FILE: render("SKILL.md", target_speedup=target, precision=precision),
            TASK_FILE: task.source,
        }
        ws = cls(root, originals)
        ws.restore_read_only()
        starter = root / MODEL_NEW
        if not starter.exists():
            starter.write_text(starter_model_new(task.source))
        return ws

    # ------------------------------------------------------------------ paths
    def resolve(self, path: str) -> Path:
        """A path inside the workspace, or PathError. Relative paths are taken from the root;
        absolute ones must already point inside it; symlinks are followed before the check."""
        if not isinstance(path, str) or not path.strip():
            raise PathError("empty path")
        if "\0" in path:
            raise PathError("path contains a NUL byte")
        p = Path(path.strip())
        full = (p if p.is_absolute() else self.root / p).resolve()
        if full != self.root and self.root not in full.parents:
            raise PathError(f"{path}: outside the workspace (paths are relative to the workspace; "
                            "`..` and absolute paths elsewhere are not allowed)")
        return full

    def rel(self, full: Path) -> str:
        return full.relative_to(self.root).as_posix() if full != self.root else "."

    def check_writable(self, full: Path) -> None:
        rel = self.rel(full)
        if rel in self.read_only:
            raise PathError(f"{rel} is read-only (it belongs to the harness); write model_new.py and kernels/")

    # ------------------------------------------------------------------ read-only files
    def restore_read_only(self) -> list[str]:
        """Put every read-only file back if missing or changed; returns the names restored."""
        restored = []
        for name, text in self.read_only.items():
            path = self.root / name
            want = hashlib.sha256(text.encode()).hexdigest()
            try:
                ok = path.is_file() and not path.is_symlink() and \
                    hashlib.sha256(path.read_bytes()).hexdigest() == want
            except OSError:
                ok = False
            if not ok:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.is_symlink() or path.exists():
                    path.unlink()
                path.write_text(text)
                restored.append(name)
            path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        return restored

    # ------------------------------------------------------------------ solution files
    def solution_files(self) -> dict[str, bytes]:
        """The candidate: model_new.py and every file under kernels/ (relative path -> bytes)."""
        files = {}  # symbolic links are not the agent's code: one made by `bash` could point anywhere
        model_new = self.root / MODEL_NEW
        if model_new.is_file() and not model_new.is_symlink():
            files[MODEL_NEW] = model_new.read_bytes()
        kdir = self.root / KERNELS
        if kdir.is_dir() and not kdir.is_symlink():
            for p in sorted(kdir.rglob("*")):
                if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts \
                        and not any(q.is_symlink() for q in p.parents if kdir in q.parents) \
                        and p.stat().st_size <= MAX_SOLUTION_FILE_BYTES:
                    files[p.relative_to(self.root).as_posix()] = p.read_bytes()
        return files

    @staticmethod
    def fingerprint(files: dict[str, bytes]) -> str:
        h = hashlib.sha256()
        for name in sorted(files):
            h.update(name.encode() + b"\0" + files[name] + b"\0")
        return h.hexdigest()

    def snapshot(self, candidates_dir: Path) -> tuple[Solution, str, dict[str, bytes]]:
        """Copy the solution files to ``candidates_dir/<hash>/`` (once per content) and return the
        sandbox Solution for it, its fingerprint and the files."""
        files = self.solution_files()
        fp = self.fingerprint(files)
        dest = Path(candidates_dir) / fp[:16]
        if not dest.is_dir():
            tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            for name, data in files.items():
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp / name).write_bytes(data)
            tmp.mkdir(parents=True, exist_ok=True)
            try:
                tmp.rename(dest)
            except OSError:  # the same content was snapshotted meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
        return load_solution(dest), fp, files

    def state_key(self) -> str:
        """A fingerprint of the whole workspace, for loop detection: the contents of regular files up to
        STATE_KEY_FILE_BYTES (rewriting a file with the same text is no change), size and mtime of larger
        ones and of any once STATE_KEY_READ_BYTES have been read, a symlink's target text and another
        special file's type. Nothing is followed and only regular files are opened (:func:`read_regular`):
        `bash` can leave a FIFO, or a link to /dev/zero, here."""
        h = hashlib.sha256()
        budget, seen, dirs = STATE_KEY_READ_BYTES, 0, [self.root]
        while dirs:
            try:
                with os.scandir(dirs.pop()) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                seen += 1
                if seen > STATE_KEY_MAX_ENTRIES:
                    h.update(b"\0more entries")
                    return h.hexdigest()
                try:
                    st = e.stat(follow_symlinks=False)
                    h.update(os.fsencode(e.path) + b"\0")
                    if stat.S_ISDIR(st.st_mode):
                        dirs.append(e.path)
                        h.update(b"d\0")
                    elif stat.S_ISLNK(st.st_mode):
                        h.update(b"l" + os.fsencode(os.readlink(e.path)) + b"\0")
                    elif stat.S_ISREG(st.st_mode):
                        limit = min(STATE_KEY_FILE_BYTES, budget)
                        data = read_regular(e.path, limit) if st.st_size <= limit else None
                        if data is not None:
                            budget -= len(data)
                            h.update(b"f" + hashlib.sha256(data).digest())
                        else:
                            h.update(f"s{st.st_size}\0{st.st_mtime_ns}\0".encode())
                    else:
                        h.update(f"t{stat.S_IFMT(st.st_mode)}\0".encode())
                except OSError:
                    continue
        return h.hexdigest()


def read_regular(path: str | os.PathLike, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file, not a symlink, of at most ``limit`` bytes; else None.
    Nothing else is ever opened (a FIFO blocks its reader, a link to /dev/zero never ends): the type is
    checked before opening, then again on the descriptor, opened without following a link or blocking."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        data = f.read(limit + 1)
    return data if len(data) <= limit else None


# ---------------------------------------------------------------------------- starter

STARTER_NOTE = ("# Starter written by the harness: Model's constructor, copied, so that\n"
                "# load_state_dict(Model(...).state_dict()) works. Replace forward with calls to your kernels\n"
                "# (kernels/*.cu + kernels/*_binding.cpp, built into `cuda_ext`). See SKILL.md.\n")


def starter_model_new(task_source: str) -> str:
    """``model_new.py`` to start from: the task's imports and its Model class renamed ModelNew,
    with forward raising NotImplementedError. Falls back to a generic template."""
    try:
        tree = ast.parse(task_source)
    except SyntaxError:
        return render("model_new.py.tmpl")
    lines = task_source.splitlines()
    imports = [ast.get_source_segment(task_source, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if cls is None:
        return render("model_new.py.tmpl")
    fwd = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    start = (cls.decorator_list[0].lineno if cls.decorator_list else cls.lineno) - 1
    body = lines[start:cls.end_lineno]
    if fwd is not None:
        first, last = fwd.body[0].lineno - 1 - start, fwd.end_lineno - start
        # a docstring-only or one-line `def forward(...): return x` keeps its def line intact
        if fwd.body[0].lineno == fwd.lineno:
            header = lines[fwd.lineno - 1]
            indent = re.match(r"\s*", header).group(0) + "    "
            body[fwd.lineno - 1 - start] = header[: header.index(":", header.index(")")) + 1]
            body.insert(fwd.lineno - start, indent + "raise NotImplementedError(\"call your kernels here\")")
        else:
            indent = re.match(r"\s*", lines[fwd.body[0].lineno - 1]).group(0)
            body[first:last] = [indent + "# the harness calls forward with CUDA tensors; compute with cuda_ext ops only",
                                indent + "raise NotImplementedError(\"call your kernels here\")"]
    text = "\n".join(body)
    text = re.sub(r"\bclass\s+Model\b", "class ModelNew", text, count=1)
    text = re.sub(r"\bsuper\(\s*Model\s*,", "super(ModelNew,", text)
    head = "\n".join(dict.fromkeys(i for i in imports if i))
    return (f"{head}\n\n# import cuda_ext  # uncomment once kernels/ holds your kernels and binding\n\n"
            f"{STARTER_NOTE}{text}\n")
