"""The Solution record: what a candidate hands in.

Two shapes are accepted:

* **workspace** (the paper's layout)::

      model_new.py              defines class ModelNew (same constructor args as Model)
      kernels/<name>.cu         pure CUDA: __global__ kernels plus extern "C" launchers
      kernels/<name>_binding.cpp  the PyTorch binding (stable-ABI STABLE_TORCH_LIBRARY, or
                                TORCH_LIBRARY / PYBIND11_MODULE with torch/extension.h)
      kernels/*.cuh|*.h          shared headers
  The sandbox builds every ``kernels/*.cu`` and ``kernels/*_binding.cpp`` into one library,
  exposed to ``model_new.py`` as ``import cuda_ext`` (and ``torch.ops.cuda_ext`` for ops).
  Files beside them that the harness owns (``model.py``, ``SKILL.md``) are not candidate code.

* **file**: one KernelBench-style ``.py`` defining ``ModelNew`` and compiling its CUDA with
  ``torch.utils.cpp_extension.load_inline``.

A third kind, **reference**, is the task's own ``Model`` evaluated as a candidate (calibration).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

WORKSPACE = "workspace"
FILE = "file"
REFERENCE = "reference"

MODEL_FILE = "model_new.py"
KERNEL_DIR = "kernels"
HARNESS_FILES = frozenset({"model.py", "SKILL.md"})
CUDA_SUFFIXES = (".cu",)
HEADER_SUFFIXES = (".cuh", ".h", ".hpp")
BINDING_SUFFIX = "_binding.cpp"
MAX_SOURCE_BYTES = 2_000_000


class SolutionError(Exception):
    """A solution path that is not a solution at all (missing, wrong type)."""


@dataclass(frozen=True)
class Solution:
    kind: str
    path: Path

    @property
    def root(self) -> Path:
        return self.path if self.kind == WORKSPACE else self.path.parent

    @property
    def model_file(self) -> Path:
        return self.path / MODEL_FILE if self.kind == WORKSPACE else self.path

    def cuda_sources(self) -> list[Path]:
        return self._kernel_files(lambda p: p.suffix in CUDA_SUFFIXES)

    def binding_sources(self) -> list[Path]:
        return self._kernel_files(lambda p: p.name.endswith(BINDING_SUFFIX))

    def header_files(self) -> list[Path]:
        return self._kernel_files(lambda p: p.suffix in HEADER_SUFFIXES)

    def python_files(self) -> list[Path]:
        if self.kind == FILE:
            return [self.path]
        if self.kind == REFERENCE:
            return []
        return sorted(p for p in self.path.glob("*.py") if p.name not in HARNESS_FILES)

    def source_files(self) -> list[Path]:
        """Every file that is candidate code: what is hashed, scanned and built."""
        if self.kind == REFERENCE:
            return [self.path]
        other_cpp = self._kernel_files(lambda p: p.suffix == ".cpp" and not p.name.endswith(BINDING_SUFFIX))
        return sorted(set(self.python_files() + self.cuda_sources() + self.binding_sources()
                          + self.header_files() + other_cpp))

    def read(self, path: Path) -> str:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise SolutionError(f"{path}: larger than {MAX_SOURCE_BYTES} bytes")
        return path.read_text(errors="replace")

    def display(self, path: Path) -> str:
        """A path as a reader of the log wants it: relative to the solution root."""
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def fingerprint(self) -> str:
        h = hashlib.sha256(self.kind.encode())
        for p in self.source_files():
            h.update(self.display(p).encode() + b"\0" + p.read_bytes() + b"\0")
        return h.hexdigest()

    def _kernel_files(self, keep) -> list[Path]:
        if self.kind != WORKSPACE:
            return []
        kdir = self.path / KERNEL_DIR
        return sorted(p for p in kdir.rglob("*") if p.is_file() and keep(p)) if kdir.is_dir() else []

    def to_str(self) -> str:
        return f"{self.kind}:{self.path}"


def load_solution(path: str | Path) -> Solution:
    """A directory is a workspace; a ``.py`` file is a single-file solution."""
    path = Path(path).resolve()
    if path.is_dir():
        return Solution(WORKSPACE, path)
    if path.is_file():
        if path.suffix != ".py":
            raise SolutionError(f"{path}: a solution is a workspace directory or a .py file")
        return Solution(FILE, path)
    raise SolutionError(f"{path}: no such solution file or directory")


def reference_solution(task_path: str | Path) -> Solution:
    return Solution(REFERENCE, Path(task_path).resolve())
