"""The evaluation service's two timeout paths, runnable by any Python the package supports.

``python tests/service_timeout_probe.py TASK.py`` (with ``src`` on PYTHONPATH) prints one JSON line.
tests/test_train_service_safety.py runs it under Python 3.10 ... 3.13 where they exist: the paths
hinge on ``concurrent.futures.TimeoutError``, which is the builtin ``TimeoutError`` only from 3.11.
Stdlib and the package only (no torch, no pytest), so a bare interpreter can run it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout

from cuda_agent.sandbox.verdict import Verdict
from cuda_agent.tasks import Task
from cuda_agent.train import service
from cuda_agent.train.client import EvalClient, EvalUnavailable
from cuda_agent.train.evaluator import EvalResult

FILES = {"model_new.py": "class ModelNew:\n    pass\n"}


class Gate:
    """An evaluator that counts its calls and holds each until ``release`` is set; its verdict is a
    plain rejection. It stands in for the sandbox where what is tested is the service's handling of
    a job that takes long, not the verdict."""

    def __init__(self, open_: bool = False):
        self.calls = 0
        self.release = threading.Event()
        if open_:
            self.release.set()

    def evaluate(self, task, files, reward_kind="paper"):
        self.calls += 1
        self.release.wait(120)
        v = Verdict(verdict="rejected", task=task.name)
        v.reject("scripted", "scripted")
        return EvalResult(verdict=v, reward=-1.0)


def wait_until(predicate, what: str, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def probe(task: Task) -> dict:
    gate = Gate()
    service.LocalEvaluator = lambda sandbox: gate
    svc = service.EvalService(service.EvalServiceConfig(port=0, gpus=[0], per_gpu=1, job_timeout_s=0.2, isolation="none")).start()
    out: dict = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    try:
        first = svc.submit(task, FILES, "paper", 60.0)  # takes the one worker, held by the gate
        wait_until(lambda: svc.health()["running"] == 1, "the first job to start")
        # 1. A request whose time is up while its job waits: Future.result(timeout=) raises -> 504.
        try:
            EvalClient(svc.url, retries=0, timeout_s=0.2, token="").evaluate(task, FILES)
            out["request_past_timeout"] = "answered"
        except EvalUnavailable as e:
            out["request_past_timeout"] = str(e)
        # 2. A job still in the queue past its deadline when a worker comes to it: dropped unrun.
        late = svc.submit(task, FILES, "paper", 0.0)
        gate.release.set()
        try:
            svc.wait(late, 60.0)
            out["queued_past_deadline"] = "answered"
        except FutureTimeout as e:
            out["queued_past_deadline"] = f"FutureTimeout: {e}"
        out["first"] = svc.wait(first, 60.0).verdict.verdict
        out["evaluations"] = gate.calls
        out["health"] = svc.health()
    finally:
        svc.stop()
    return out


if __name__ == "__main__":
    path = sys.argv[1]
    with open(path) as f:
        print(json.dumps(probe(Task(name="probe", source=f.read()))))
