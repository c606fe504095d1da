"""A tiny KernelBench-like tree and solutions for the bench tests, written into a tmp directory.

Every solution here gets a real verdict from the sandbox on a host without a GPU: static
rejections and compile errors. ``needs_gpu`` builds and then needs a GPU (NoGpuError).
"""

from __future__ import annotations

from pathlib import Path

PROBLEM = '''"""Problem {pid}: relu(x) + {pid}."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) + {pid}


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''

REJECTED_MODEL = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) + {pid}  # torch compute in forward: rejected
'''

CUDA_MODEL = '''import torch.nn as nn

import cuda_ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_ext.relu_add(x.contiguous())
'''

BROKEN_CU = '''// problem {pid}
__global__ void relu_add_kernel(const float* x, float* y, long n) {{
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f) + {pid} +;
}}
'''

BROKEN_FILE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

class ModelNew(nn.Module)   # missing colon: a syntax error
    def forward(self, x):
        return x
'''


def write_problems(root: Path, level: int, ids) -> Path:
    level_dir = root / f"level{level}"
    level_dir.mkdir(parents=True, exist_ok=True)
    for pid in ids:
        (level_dir / f"{pid}_relu_add_{pid}.py").write_text(PROBLEM.format(pid=pid))
    return root


def rejected(path: Path, pid: int) -> Path:
    path.mkdir(parents=True)
    (path / "model_new.py").write_text(REJECTED_MODEL.format(pid=pid))
    return path


def compile_error(path: Path, pid: int) -> Path:
    (path / "kernels").mkdir(parents=True)
    (path / "model_new.py").write_text(CUDA_MODEL)
    (path / "kernels" / "relu_add.cu").write_text(BROKEN_CU.format(pid=pid))
    return path


def broken_file(path: Path) -> Path:
    path.write_text(BROKEN_FILE)
    return path


NEEDS_GPU_MODEL = '''import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.contiguous()  # passes the static rules, nothing to build: judging it needs a GPU
'''


def needs_gpu(path: Path) -> Path:
    """A workspace that passes the static rules and builds (there is nothing to build), so
    without a GPU evaluate raises NoGpuError."""
    path.mkdir(parents=True)
    (path / "model_new.py").write_text(NEEDS_GPU_MODEL)
    return path


# ----------------------------------------------------------------------------- results databases

def verdict(task: str, kind: str, eager: float | None = None, compile_: float | None = None, ms: float | None = None,
            flags=(), reason: str | None = None, gpu: str = "NVIDIA H200", precision: str = "fp32") -> dict:
    """A real Verdict (the sandbox's record) as the sandbox fills it, in its JSON form."""
    from cuda_agent.sandbox import Verdict, paper_reward

    v = Verdict(task=task, solution=f"workspace:/x/{task}", verdict=kind)
    v.precision = {"mode": precision}
    if reason:
        v.add_reason(reason)
    for f in flags:
        v.flag(f)
    if kind == "correct" or kind == "incorrect":
        v.gpu, v.torch_version, v.num_trials = gpu, "2.9.1+cu130", 7
    if kind == "correct":
        v.ms, v.eager_ms, v.compile_ms = ms, eager, compile_
        v.speedup_vs_eager = round(eager / ms, 4)
        v.speedup_vs_compile = round(compile_ / ms, 4) if compile_ else None
        v.rel_err, v.tolerance, v.allclose_1e2 = 1e-6, 1e-4, True
    v.reward = paper_reward(v)
    return v.to_dict()


def fill_run(root: Path, rows, config: dict | None = None) -> Path:
    """A run directory whose database holds ``rows``: (level, problem_id, verdict dict[, sample])."""
    from cuda_agent.bench.store import Result, ResultsDB, RunDir

    run = RunDir(root)
    run.write_config(config or {"format_version": 1, "mode": "solutions", "precision": "fp32", "torch": "2.9.1",
                                "invocations": [{"started": "2026-01-01T00:00:00", "gpus": ["NVIDIA H200"]}]})
    db = ResultsDB(run.db_path)
    for row in rows:
        level, pid, v = row[:3]
        sample = row[3] if len(row) > 3 else 0
        db.add(Result(task=f"L{level}_{pid}", sample=sample, status="evaluated", verdict=v, level=level,
                      problem_id=pid, title=f"{pid}_problem", lane="gpu0", started=0.0, finished=1.0))
    db.close()
    return root


def demo_rows(seed: int, per_level=(12, 10, 6), skill: float = 1.0):
    """Plausible results of a policy over three levels (for report tests and screenshots)."""
    import random

    rng = random.Random(seed)
    rows = []
    failures = [("incorrect", "trial 0 (task inputs): rel err 3.1e-01 > 1e-04"),
                ("compile_error", "build failed"), ("rejected", "forward ran torch operators that compute: aten::mm"),
                ("runtime_error", "CUDA error: an illegal memory access was encountered while running forward"),
                ("timeout", "no reply within 180 s (a hang or an endless loop in a kernel?)")]
    for level, n in zip((1, 2, 3), per_level):
        for pid in range(1, n + 1):
            task = f"L{level}_{pid}"
            if rng.random() < 0.72 * skill:
                eager = rng.uniform(0.05, 5.0)
                compile_ = eager * rng.uniform(0.5, 1.1)
                ms = compile_ / rng.lognormvariate(0.25 * skill, 0.45)
                flags = ("excessive_speedup",) if eager / ms > 10 else ()
                rows.append((level, pid, verdict(task, "correct", eager, compile_, ms, flags)))
            else:
                kind, reason = failures[rng.randrange(len(failures))]
                flags = ("torch_compute",) if kind == "rejected" else ()
                rows.append((level, pid, verdict(task, kind, reason=reason, flags=flags)))
    return rows


# ----------------------------------------------------------------------------- a scripted policy

def scripted_solver(task, workdir: Path, argv: list[str]):
    """A stand-in for the agent (only the LLM is scripted): writes a workspace per task and a
    trajectory. Problem 2: a compile error; problem 3: the episode crashes; others: a rejected
    cheat. Every call is counted in the file named by ``--calls FILE`` in argv."""
    calls = Path(argv[argv.index("--calls") + 1])
    with open(calls, "a") as f:
        f.write(f"{task.name}\n")
    pid = task.meta["problem_id"]
    if pid == 3:
        raise RuntimeError("the LLM backend went away")
    workspace = workdir / "workspace"
    (compile_error if pid == 2 else rejected)(workspace, pid)
    trajectory = workdir / "trajectory.jsonl"
    trajectory.write_text('{"step": 0, "action": "write_file"}\n{"step": 1, "action": "submit"}\n')
    return workspace, trajectory
