import os
import shutil
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tests" / "tasks"
SOLUTIONS = ROOT / "tests" / "solutions"
EXAMPLES = ROOT / "examples"


def _has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


HAS_CUDA = _has_cuda()
HAS_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on a GPU host)")
    skip_nvcc = pytest.mark.skip(reason="needs nvcc")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if "nvcc" in item.keywords and not HAS_NVCC:
            item.add_marker(skip_nvcc)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One cache (builds, baselines) per test session, shared by every GPU test."""
    path = Path(os.environ.get("CUDA_AGENT_TEST_CACHE") or tmp_path_factory.mktemp("cuda_agent_cache"))
    return path


CLOCKS = ("iters", "gpu_median_ms", "wall_median_ms", "gap_ms", "gap_curve", "evaluator_ms_per_iter", "harness_overhead_ms",
          "control_overhead_ms", "retimed", "gpu_lock_s", "gpu_exclusive_s", "gpu_lock_setup_s")
"""The timing figures a GPU test prints with its verdict: a failed timing assertion then shows which clock
moved (events, the worker's wall clock, the evaluator's) and by how much."""


def clocks(v) -> dict:
    return {k: v.timing[k] for k in CLOCKS if k in v.timing}


def within(seconds: float, fn):
    """fn(), or a failure after ``seconds``: run in a daemon thread, so that a hang fails instead of blocking."""
    box = {}
    t = threading.Thread(target=lambda: box.update(result=fn()), daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    assert "result" in box, "raised (see the thread's traceback above)"
    return box["result"]


def wait_until_locked(path, timeout_s: float = 60.0, stop=None) -> bool:
    """Wait until some other open file holds an flock on ``path``: True once one does; False after ``timeout_s``,
    or once ``stop`` (a threading.Event) is set."""
    import fcntl
    import time

    deadline = time.monotonic() + timeout_s
    with open(path, "a") as f:
        while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                time.sleep(0.01)
            except BlockingIOError:
                return True
    return False
