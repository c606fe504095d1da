"""A replayed episode whose compile, verify and submit run the REAL sandbox. On a host without a GPU
the verdicts that need no GPU are real (a compile error from nvcc, a static-rule rejection), and a
solution that gets as far as the GPU comes back as a clear tool message."""

import pytest

from cuda_agent.agent import make_backend, run_episode

from .agent_support import BROKEN_CU, IDENTITY_MODEL_NEW, THREAD_MODEL_NEW, call, config, tiny_task, tool_messages
from .conftest import HAS_CUDA

pytestmark = pytest.mark.nvcc

MODEL_NEW = "import torch.nn as nn\n\nimport cuda_ext\n\n\nclass ModelNew(nn.Module):\n" \
            "    def forward(self, x):\n        return cuda_ext.swish(x.contiguous())\n"


@pytest.mark.skipif(HAS_CUDA, reason="checks the GPU-less path")
def test_replayed_episode_through_the_real_sandbox(tmp_path):
    steps = [
        call("read_file", path="model.py"),
        call("write_file", path="kernels/swish.cu", content=BROKEN_CU),
        call("write_file", path="model_new.py", content=MODEL_NEW),
        call("compile"),
        call("verify"),
        call("bash", command="rm -r kernels/swish.cu"),
        call("write_file", path="model_new.py", content=THREAD_MODEL_NEW),
        call("verify"),
        call("write_file", path="model_new.py", content=IDENTITY_MODEL_NEW),
        call("verify"),
        call("write_file", path="model_new.py", content=IDENTITY_MODEL_NEW + "\n# changed\n"),
        call("submit", summary="nothing works here"),
    ]
    rec = run_episode(tiny_task(tmp_path), make_backend("replay", steps=steps), config(tmp_path),
                      run_dir=tmp_path / "run")
    out = {i: m["content"] for i, m in enumerate(tool_messages(rec))}
    assert "build failed" in out[3] and "kernels/swish.cu(3): error" in out[3]
    assert '"verdict": "compile_error"' in out[4] and "kernels/swish.cu(3)" in out[4]
    assert '"verdict": "rejected"' in out[7] and "threads" in out[7]
    assert out[9].startswith("cannot verify on this host") and "GPU" in out[9]
    assert "verified the last changes first" in out[11] and "cannot verify on this host" in out[11]
    assert [v["verdict"]["verdict"] for v in rec["verdicts"]] == ["compile_error", "rejected"]
    assert [v["turn"] for v in rec["verdicts"]] == [5, 8]
    assert rec["ended_by"] == "submitted" and rec["best"] is None and rec["reward"] == -1.0
    t = rec["timings"]
    assert t["sandbox_s"] > 0 and abs(t["wall_s"] - t["llm_s"] - t["tool_s"] - t["sandbox_s"] - t["overhead_s"]) < 0.01
    # the sandbox saw snapshots of model_new.py + kernels/ only, never the workspace itself
    snapshots = sorted((tmp_path / "run" / "candidates").iterdir())
    assert snapshots and all(not (s / "model.py").exists() for s in snapshots)
