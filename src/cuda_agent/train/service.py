"""The evaluation service: the sandbox behind HTTP, on GPUs that training does not use.

    cuda-agent train serve --gpus 6,7 --port 8420            # on the node that times kernels
    EvalClient("http://host:8420").evaluate(task, files)      # from rollouts, or `bench`

Why: kernel timing must never share a GPU with training or generation (a busy GPU makes
every speedup a lie). Rollout workers send (task, solution files) here; one worker pool per
GPU evaluates them with ``SandboxConfig(device=gpu)``; the sandbox's own per-GPU lock still
gives timing the GPU alone while builds and trials of other jobs overlap.

Stdlib only (``http.server`` + threads): the GPU image has no FastAPI. Endpoints (JSON):

``POST /v1/evaluate``  ``{"task": {"name", "source"}, "files": {path: text}, "reward": "paper",
                         "timeout_s": 900}``
    -> 200 ``{"verdict": {...Verdict JSON...}, "reward": r, "gpu": i, "queue_s": s, "eval_s": s}``
       (``reward`` is null for a ``harness_error`` verdict: not the candidate's failure, left out of training)
    -> 400 bad request (the message says what); 429 queue full (retry later);
       503 no GPU on this host; 504 the job did not finish within its timeout.
``GET /v1/health``     -> ``{"ok": true, "gpus": [...], "queued": n, "running": n, "done": n,
                         "failed": n, "harness_errors": n, "max_queue": n}`` (``harness_errors``: done
                         jobs whose verdict was harness_error; a rising count is a broken host or task)

Limits: ``max_queue`` jobs waiting (beyond: 429), ``per_gpu`` jobs running per GPU,
``job_timeout_s`` per job from arrival (a job that waited too long is dropped unrun with 504).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..sandbox import NoGpuError, SandboxConfig
from ..sandbox.reward import REWARDS
from ..tasks import Task, TaskError, check_task_source
from .evaluator import LocalEvaluator
from .solution_io import SINGLE_FILE, allowed_path

MAX_BODY = 8 << 20


@dataclass
class EvalServiceConfig:
    """Where the service listens and how much it takes on."""

    host: str = "127.0.0.1"
    """Bind address; 0.0.0.0 to serve a cluster (put it on a private network)."""
    port: int = 8420
    """0 picks a free port (tests)."""
    gpus: list[int] = field(default_factory=lambda: [0])
    """GPU indices reserved for timing: give training and generation the others."""
    per_gpu: int = 2
    """Jobs in flight per GPU: >1 overlaps one job's build with another's GPU phase."""
    max_queue: int = 512
    """Waiting jobs beyond this are refused with 429 (clients back off and retry)."""
    job_timeout_s: float = 1200.0
    """Default per-job limit from arrival, queueing included (a request may ask for less)."""
    precision: str = "fp32"
    rules: str = "cuda-agent"
    """The sandbox's rule set (SandboxConfig.rules): cuda-agent or kernelbench."""
    rep_ms: float = 200.0
    """Timing budget per measurement (SandboxConfig.rep_ms)."""
    cache_dir: Path | None = None
    """Sandbox cache (builds, baselines); None: the sandbox default."""


@dataclass
class _Job:
    task: Task
    files: dict[str, str]
    reward_kind: str
    deadline: float
    arrived: float = field(default_factory=time.monotonic)
    future: Future = field(default_factory=Future)


class EvalService:
    """Queue + GPU workers + HTTP front. ``start()`` returns at once; ``stop()`` joins."""

    def __init__(self, config: EvalServiceConfig | None = None):
        self.config = cfg = config or EvalServiceConfig()
        self.queue: queue.Queue[_Job | None] = queue.Queue(maxsize=cfg.max_queue)
        self.counts = {"running": 0, "done": 0, "failed": 0, "harness_errors": 0}
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "EvalService":
        cfg = self.config
        for gpu in cfg.gpus:
            sandbox = SandboxConfig(device=gpu, precision=cfg.precision, rules=cfg.rules, rep_ms=cfg.rep_ms,
                                    spare_workers=2,
                                    **({"cache_dir": cfg.cache_dir} if cfg.cache_dir else {}))
            for slot in range(cfg.per_gpu):
                t = threading.Thread(target=self._work, args=(gpu, LocalEvaluator(sandbox)),
                                     name=f"eval-gpu{gpu}-{slot}", daemon=True)
                t.start()
                self._workers.append(t)
        self._server = ThreadingHTTPServer((cfg.host, cfg.port), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="eval-http", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for _ in self._workers:
            self.queue.put(None)
        for t in self._workers:
            t.join(timeout=5)

    def serve_forever(self) -> None:
        self.start()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            self.stop()

    # ------------------------------------------------------------------ jobs
    def submit(self, task: Task, files: dict[str, str], reward_kind: str, timeout_s: float) -> _Job:
        job = _Job(task, files, reward_kind, deadline=time.monotonic() + timeout_s)
        self.queue.put_nowait(job)  # queue.Full -> 429
        return job

    def health(self) -> dict[str, Any]:
        with self._lock:
            return {"ok": True, "gpus": self.config.gpus, "queued": self.queue.qsize(),
                    "max_queue": self.config.max_queue, **self.counts}

    def _work(self, gpu: int, evaluator: LocalEvaluator) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            if not job.future.set_running_or_notify_cancel():
                continue  # the request gave up (timeout) while the job waited
            if time.monotonic() > job.deadline:
                job.future.set_exception(TimeoutError("timed out in the queue"))
                continue
            queue_s = time.monotonic() - job.arrived
            with self._lock:
                self.counts["running"] += 1
            try:
                result = evaluator.evaluate(job.task, job.files, job.reward_kind)
                result.queue_s = round(queue_s, 3)
                job.future.set_result(result)
                ok = True
            except BaseException as e:  # noqa: BLE001 - handed to the waiting request
                job.future.set_exception(e)
                ok = False
            with self._lock:
                self.counts["running"] -= 1
                self.counts["done" if ok else "failed"] += 1
                if ok and result.verdict.harness_error:
                    self.counts["harness_errors"] += 1


def parse_request(body: dict[str, Any], default_timeout_s: float) -> tuple[Task, dict[str, str], str, float]:
    """Validate one /v1/evaluate body. Raises ValueError with a sentence for the client."""
    task = body.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("source"), str):
        raise ValueError('"task" must be {"name": str, "source": str}')
    name = str(task.get("name") or "task")
    try:
        check_task_source(task["source"], f"<task {name}>")
    except TaskError as e:
        raise ValueError(str(e)) from None
    files = body.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValueError('"files" must map relative paths to file contents')
    bad = [p for p in files if p != SINGLE_FILE and not allowed_path(p)]
    if bad:
        raise ValueError(f"not paths a solution may have: {bad}")
    kind = body.get("reward", "paper")
    if kind not in REWARDS:
        raise ValueError(f'"reward" must be one of {sorted(REWARDS)}')
    timeout_s = min(float(body.get("timeout_s") or default_timeout_s), default_timeout_s)
    return Task(name=name, source=task["source"], meta=dict(task.get("meta") or {})), files, kind, timeout_s


def _handler(service: EvalService):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the service logs jobs, not requests
            pass

        def _send(self, code: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/health":
                self._send(200, service.health())
            else:
                self._send(404, {"error": f"no such endpoint: {self.path}"})

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/evaluate":
                return self._send(404, {"error": f"no such endpoint: {self.path}"})
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > MAX_BODY:
                return self._send(400, {"error": f"body must be 1..{MAX_BODY} bytes of JSON"})
            try:
                body = json.loads(self.rfile.read(length))
                task, files, kind, timeout_s = parse_request(body, service.config.job_timeout_s)
            except (ValueError, json.JSONDecodeError) as e:
                return self._send(400, {"error": str(e)})
            try:
                job = service.submit(task, files, kind, timeout_s)
            except queue.Full:
                return self._send(429, {"error": "queue full", "queued": service.queue.qsize()})
            try:
                result = job.future.result(timeout=max(0.0, job.deadline - time.monotonic()) + 1.0)
            except TimeoutError as e:
                job.future.cancel()
                return self._send(504, {"error": f"job did not finish in {timeout_s:.0f} s: {e}"})
            except NoGpuError as e:
                return self._send(503, {"error": f"no GPU on the evaluation host: {e}"})
            except Exception as e:  # noqa: BLE001 - a service bug: report it, keep serving
                return self._send(500, {"error": f"{type(e).__name__}: {e}"})
            self._send(200, {"verdict": result.verdict.to_dict(), "reward": result.reward, "gpu": result.gpu,
                             "queue_s": result.queue_s, "eval_s": result.verdict.eval_s})

    return Handler
