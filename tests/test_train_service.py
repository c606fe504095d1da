"""The evaluation service, its client and the sandbox reward, on 127.0.0.1 with the real sandbox.

What works without a GPU is run for real: static rejections (no build) and compile errors
(nvcc, marked ``nvcc``). Correct kernels need a GPU and are marked ``gpu``.
"""

import json
import threading
import time
import urllib.request

import pytest

from cuda_agent.sandbox import NoGpuError, SandboxConfig
from cuda_agent.tasks import load_task
from cuda_agent.train.client import EvalClient, EvalUnavailable
from cuda_agent.train.evaluator import EvalResult, LocalEvaluator
from cuda_agent.train.rewards import SandboxReward
from cuda_agent.train.service import EvalService, EvalServiceConfig
from cuda_agent.train.solution_io import read_files, render_files

from .conftest import EXAMPLES, HAS_CUDA, SOLUTIONS

SWISH = load_task(EXAMPLES / "swish" / "task.py", name="swish")
CHEAT = read_files(SOLUTIONS / "cheat_torch_fallback")      # torch.sigmoid in forward: static rejection
BROKEN = read_files(SOLUTIONS / "compile_error")            # nvcc error at kernels/ew.cu(4)
HONEST = read_files(EXAMPLES / "swish" / "solution")


@pytest.fixture()
def service(cache_dir):
    svc = EvalService(EvalServiceConfig(port=0, gpus=[0], per_gpu=2, max_queue=8, cache_dir=cache_dir)).start()
    yield svc
    svc.stop()


def test_static_rejection_through_the_service(service):
    r = EvalClient(service.url, retries=0).evaluate(SWISH, CHEAT)
    assert r.verdict.verdict == "rejected" and r.reward == -1
    assert "torch_compute" in json.dumps(r.verdict.static_findings)
    assert service.health()["done"] == 1


@pytest.mark.nvcc
def test_compile_error_through_the_service(service):
    r = EvalClient(service.url, retries=0).evaluate(SWISH, BROKEN, "speedup")
    assert r.verdict.verdict == "compile_error" and r.reward == -1 and "kernels/ew.cu(4)" in r.verdict.log


def test_bad_requests_are_400_and_not_retried(service):
    client = EvalClient(service.url, retries=3, backoff_s=0.01)
    with pytest.raises(ValueError, match="400"):
        client.evaluate(SWISH, {"../x.py": "y"})
    with pytest.raises(ValueError, match="reward"):
        client.evaluate(SWISH, CHEAT, "nonsense")
    req = urllib.request.Request(service.url + "/v1/evaluate", data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400


class _SlowEvaluator:
    def __init__(self, delay):
        self.delay = delay

    def evaluate(self, task, files, reward_kind="paper"):
        time.sleep(self.delay)
        return LocalEvaluator().evaluate(task, files, reward_kind)


def test_queue_full_is_429_and_the_client_retries(service, monkeypatch):
    service.stop()  # a service whose single worker is slow: the queue (size 1) fills
    svc = EvalService(EvalServiceConfig(port=0, gpus=[0], per_gpu=1, max_queue=1))
    monkeypatch.setattr("cuda_agent.train.service.LocalEvaluator", lambda sandbox: _SlowEvaluator(0.3))
    svc.start()
    try:
        results, codes = [], []

        def call():
            try:
                results.append(EvalClient(svc.url, retries=0).evaluate(SWISH, CHEAT))
            except EvalUnavailable as e:
                codes.append(str(e))

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert any("429" in c for c in codes), codes  # one running, one queued, the rest refused
        retried = EvalClient(svc.url, retries=6, backoff_s=0.2).evaluate(SWISH, CHEAT)  # backs off until room
        assert retried.verdict.verdict == "rejected"
    finally:
        svc.stop()


def test_job_timeout_is_504(monkeypatch):
    monkeypatch.setattr("cuda_agent.train.service.LocalEvaluator", lambda sandbox: _SlowEvaluator(2.0))
    svc = EvalService(EvalServiceConfig(port=0, gpus=[0], per_gpu=1, job_timeout_s=0.3)).start()
    try:
        with pytest.raises(EvalUnavailable, match="504"):
            EvalClient(svc.url, retries=0, timeout_s=0.3).evaluate(SWISH, CHEAT)
    finally:
        svc.stop()


def test_unreachable_service_raises_after_retries():
    with pytest.raises(EvalUnavailable, match="3 tries"):
        EvalClient("http://127.0.0.1:9", retries=2, backoff_s=0.01, timeout_s=1).evaluate(SWISH, CHEAT)


@pytest.mark.nvcc  # the build must succeed to reach the GPU check
def test_no_gpu_is_an_error_not_a_reward(service):
    if HAS_CUDA:
        pytest.skip("this host has a GPU")
    with pytest.raises(NoGpuError):
        EvalClient(service.url, retries=0).evaluate(SWISH, HONEST)


# ---------------------------------------------------------------------------- the TRL reward function

def _completions(*texts):
    return [[{"role": "assistant", "content": t}] for t in texts]


def test_reward_function_real_verdicts_without_gpu(tmp_path, cache_dir):
    reward = SandboxReward(SandboxReward.Config(log_path=tmp_path / "rollouts.jsonl"), [SWISH],
                           LocalEvaluator(SandboxConfig(cache_dir=cache_dir)))
    texts = ["Sure!\n" + render_files(CHEAT), "no code here"]
    out = reward(prompts=[None] * 2, completions=_completions(*texts), task_name=["swish"] * 2)
    assert out == [-1.0, -1.0]
    assert reward.stats["pass_rate"] == 0 and reward.stats["reward_frac_-1"] == 1.0
    assert reward.stats["verdict_rejected"] == 1.0  # static rule, and the format error
    lines = [json.loads(l) for l in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert [l["verdict"] for l in lines] == ["rejected", "rejected"]
    assert "format_error" in json.dumps(reward.evaluate_text("swish", "nothing").verdict.flags)


@pytest.mark.nvcc
def test_reward_function_compile_error(cache_dir):
    reward = SandboxReward(SandboxReward.Config(kind="log_speedup"), [SWISH],
                           LocalEvaluator(SandboxConfig(cache_dir=cache_dir)))
    r = reward.evaluate_text("swish", render_files(BROKEN))
    assert r.verdict.verdict == "compile_error" and r.reward == -1


@pytest.mark.gpu
def test_reward_function_honest_kernel_on_gpu(cache_dir):
    reward = SandboxReward(SandboxReward.Config(), [SWISH], LocalEvaluator(SandboxConfig(cache_dir=cache_dir)))
    out = reward(completions=_completions(render_files(HONEST)), task_name=["swish"])
    assert out[0] >= 1 and reward.stats["pass_rate"] == 1.0


def test_eval_result_defaults_mean_failed():
    r = EvalResult()
    assert r.reward == -1 and not r.verdict.ok
