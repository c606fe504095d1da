"""The evaluation service: the sandbox behind HTTP, on GPUs that training does not use.

    cuda-agent train serve --gpus 6,7 --port 8420                                  # this machine only
    cuda-agent train serve --gpus 6,7 --host 0.0.0.0 --token-file ~/.eval_token   # a cluster network
    EvalClient("http://host:8420").evaluate(task, files)      # from rollouts, or `bench`

Why: kernel timing must never share a GPU with training or generation (a busy GPU makes
every speedup a lie). Rollout workers send (task, solution files) here; one worker pool per
GPU evaluates them with ``SandboxConfig(device=gpu)``; the sandbox's own per-GPU lock still
gives timing the GPU alone while builds and trials of other jobs overlap.

Stdlib only (``http.server`` + threads): the GPU image has no FastAPI. Endpoints (JSON):

``POST /v1/evaluate``  ``{"task": {"name", "source"}, "files": {path: text}, "reward": "paper",
                         "timeout_s": 900}``, headers ``Authorization: Bearer <token>`` (when the
                         service has one) and ``Idempotency-Key: <key>`` (optional)
    -> 200 ``{"verdict": {...Verdict JSON...}, "reward": r, "gpu": i, "queue_s": s, "eval_s": s}``
       (``reward`` is null for a ``harness_error`` verdict: not the candidate's failure, left out of training)
    -> 400 bad request (the message says what); 401 missing or wrong token; 422 an idempotency key
       reused for a different request; 429 queue full, or this client's limit reached (retry later);
       503 no GPU on this host; 504 the job did not finish within its timeout.
``GET /v1/health``     (no token needed) -> ``{"ok": true, "gpus": [...], "queued": n,
                         "oldest_queued_s": s, "running": n, "oldest_running_s": s, "clients": n,
                         "done": n, "failed": n, "harness_errors": n, "timed_out": n, "joined": n,
                         "max_queue": n, "per_client": n, "token_required": b, "authorized": b}``
                         (``harness_errors``: done jobs whose verdict was harness_error, a rising count
                         is a broken host or task; ``authorized``: whether this request's token is right)

Safety (:mod:`.auth`): with a token every request but ``/v1/health`` must carry it; without one
the service binds loopback only. The service runs the code it is sent, so these are not optional.

Idempotency: a client sends one ``Idempotency-Key`` per evaluation and the same key on every
retry of it. A retry joins the job already queued or running under that key (or gets its result,
kept ``keep_done_s`` after it finished) instead of starting a second evaluation: a 504 or a dropped
connection costs a wait, not another 20-minute evaluation. Keys are scoped to the client.

Limits: ``max_queue`` jobs waiting (beyond: 429), ``per_client`` jobs queued or running per client
(beyond: 429; a client is a remote address: one rollout node, however many workers it runs),
``per_gpu`` jobs running per GPU, ``job_timeout_s`` per job from arrival (a job that waited too long
is dropped unrun with 504; one without a key is dropped as soon as its request gives up, a keyed one
keeps its place in the queue for a retry to join).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import queue
import re
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # builtin TimeoutError only from Python 3.11
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..sandbox.config import SandboxConfig
from ..sandbox.reward import REWARDS
from ..tasks import Task, TaskError, check_task_source
from .auth import ServiceConfigError, bearer_ok, check_binding
from .evaluator import EvalResult, LocalEvaluator
from .solution_io import SINGLE_FILE, allowed_path

MAX_BODY = 8 << 20
KEY_HEADER = "Idempotency-Key"
KEY_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")


@dataclass
class EvalServiceConfig:
    """Where the service listens, who may use it and how much it takes on."""

    host: str = "127.0.0.1"
    """Bind address; 0.0.0.0 to serve a cluster (needs ``token``; put it on a private network)."""
    port: int = 8420
    """0 picks a free port (tests)."""
    gpus: list[int] = field(default_factory=lambda: [0])
    """GPU indices reserved for timing: give training and generation the others."""
    per_gpu: int = 2
    """Jobs in flight per GPU: >1 overlaps one job's build with another's GPU phase."""
    max_queue: int = 512
    """Waiting jobs beyond this are refused with 429 (clients back off and retry)."""
    per_client: int = 256
    """Jobs one client (remote address) may have queued or running at once; beyond: 429. Keeps one
    node's burst from taking the whole queue while the others wait."""
    job_timeout_s: float = 1200.0
    """Default per-job limit from arrival, queueing included (a request may ask for less)."""
    keep_done_s: float = 600.0
    """How long a finished job's result stays available to a retry carrying its idempotency key
    (a client retries within its backoff, at most a minute)."""
    token: str | None = field(default=None, repr=False)
    """Shared secret every request but /v1/health must carry; None: loopback only. Read it with
    :func:`.auth.read_token` (a file or the environment), never from a command line."""
    precision: str = "fp32"
    rules: str = "cuda-agent"
    """The sandbox's rule set (SandboxConfig.rules): cuda-agent or kernelbench."""
    rep_ms: float = 200.0
    """Timing budget per measurement (SandboxConfig.rep_ms)."""
    isolation: str = "bwrap"
    """SandboxConfig.isolation: 'bwrap' (confined; the service refuses to start where it cannot be), or
    'none' (--unsafe-no-isolation)."""
    cache_dir: Path | None = None
    """Sandbox cache (builds, baselines); None: the sandbox default."""

    def check(self) -> None:
        """Raise ServiceConfigError (one sentence) for settings that cannot work or are unsafe."""
        check_binding(self.host, self.token)
        for name in ("per_gpu", "max_queue", "per_client"):
            if getattr(self, name) < 1:
                raise ServiceConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.gpus:
            raise ServiceConfigError("--gpus names no GPU")


class Refused(Exception):
    """A request the service turns away, with its HTTP status and a sentence for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class _Job:
    task: Task | None
    files: dict[str, str]
    reward_kind: str
    deadline: float
    """Drop the job unrun if no worker took it by then (the latest deadline of its requests)."""
    client: str = "local"
    key: str | None = None
    digest: str = ""
    """Of the task, files and reward kind: a key reused for a different evaluation is refused, not joined."""
    number: int = 0
    arrived: float = field(default_factory=time.monotonic)
    started: float | None = None
    waiters: int = 1
    """Requests waiting for it; when the last gives up, a job without a key is dropped if it has not started."""
    future: Future = field(default_factory=Future)

    def replaceable(self) -> bool:
        """A retry under this key starts afresh: the job never ran (dropped) or its run raised."""
        f = self.future
        return f.cancelled() or (f.done() and f.exception() is not None)


class EvalService:
    """Queue + GPU workers + HTTP front. ``start()`` returns at once; ``stop()`` joins."""

    def __init__(self, config: EvalServiceConfig | None = None):
        self.config = cfg = config or EvalServiceConfig()
        cfg.check()
        self.queue: queue.Queue[_Job | None] = queue.Queue()  # admission (max_queue) is counted in submit
        self.counts = {"running": 0, "done": 0, "failed": 0, "harness_errors": 0, "timed_out": 0, "joined": 0}
        # Re-entrant: cancelling a job under the lock runs its done-callback, which takes the lock too.
        self._lock = threading.RLock()
        self._active: dict[int, _Job] = {}
        """Admitted jobs not finished yet (queued or running), oldest first."""
        self._keyed: dict[tuple[str, str], _Job] = {}
        """(client, idempotency key) -> its job, until ``keep_done_s`` after it finished."""
        self._expiry: collections.deque[tuple[float, tuple[str, str], _Job]] = collections.deque()
        self._numbers = itertools.count(1)
        self._workers: list[threading.Thread] = []
        self._server: ThreadingHTTPServer | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "EvalService":
        cfg = self.config
        from ..sandbox.confine import unavailable
        unconfinable = unavailable(cfg.isolation)
        if unconfinable:  # fail closed: the service runs submitted code for every client
            raise ServiceConfigError(unconfinable)
        self._server = ThreadingHTTPServer((cfg.host, cfg.port), _handler(self))  # bind first: fail before work
        self._server.daemon_threads = True
        for gpu in cfg.gpus:
            sandbox = SandboxConfig(device=gpu, precision=cfg.precision, rules=cfg.rules, rep_ms=cfg.rep_ms,
                                    spare_workers=2, isolation=cfg.isolation,
                                    **({"cache_dir": cfg.cache_dir} if cfg.cache_dir else {}))
            for slot in range(cfg.per_gpu):
                t = threading.Thread(target=self._work, args=(gpu, LocalEvaluator(sandbox)),
                                     name=f"eval-gpu{gpu}-{slot}", daemon=True)
                t.start()
                self._workers.append(t)
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
        if self._server is None:
            self.start()
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            self.stop()

    # ------------------------------------------------------------------ jobs
    def submit(self, task: Task, files: dict[str, str], reward_kind: str, timeout_s: float, *,
               client: str = "local", key: str | None = None, digest: str = "") -> _Job:
        """Admit a job, or join the one ``client`` already sent under ``key``. The caller then
        :meth:`wait`s on it. Raises :class:`Refused` (429 busy, 422 key reused for another request)."""
        cfg, now = self.config, time.monotonic()
        with self._lock:
            self._forget_finished(now)
            job = self._keyed.get((client, key)) if key is not None else None
            if job is not None and not job.replaceable():
                if job.digest != digest:
                    raise Refused(422, f"{KEY_HEADER} {key} was used for a different request")
                job.waiters += 1
                job.deadline = max(job.deadline, now + timeout_s)
                self.counts["joined"] += 1
                return job
            waiting = sum(1 for j in self._active.values() if j.started is None)
            if waiting >= cfg.max_queue:
                raise Refused(429, f"queue full: {waiting} jobs waiting")
            mine = sum(1 for j in self._active.values() if j.client == client)
            if mine >= cfg.per_client:
                raise Refused(429, f"client {client} has {mine} jobs queued or running, its limit")
            job = _Job(task, files, reward_kind, deadline=now + timeout_s, client=client, key=key, digest=digest,
                       number=next(self._numbers))
            self._active[job.number] = job
            if key is not None:
                self._keyed[(client, key)] = job
            job.future.add_done_callback(lambda _, job=job: self._finished(job))
        self.queue.put(job)
        return job

    def wait(self, job: _Job, timeout_s: float) -> EvalResult:
        """The job's result, waiting at most ``timeout_s``. Raises ``concurrent.futures.TimeoutError``
        (504; the job keeps running for a retry to join) or what the evaluation raised."""
        try:
            return job.future.result(timeout=timeout_s)
        except FutureTimeout:
            with self._lock:
                self.counts["timed_out"] += 1
            raise
        finally:
            with self._lock:
                job.waiters -= 1
                if job.waiters == 0 and job.key is None:
                    job.future.cancel()  # drops it if still queued; a running or finished job is untouched
                # A keyed job keeps its place in the queue: a retry joining it extends its deadline (else
                # the worker drops it when it comes up), so a retry never goes back to the end of the queue.

    def health(self) -> dict[str, Any]:
        cfg, now = self.config, time.monotonic()
        with self._lock:
            queued = [j.arrived for j in self._active.values() if j.started is None]
            running = [j.started for j in self._active.values() if j.started is not None]
            return {"ok": True, "gpus": cfg.gpus, "queued": len(queued),
                    "oldest_queued_s": round(now - min(queued), 3) if queued else 0.0,
                    "oldest_running_s": round(now - min(running), 3) if running else 0.0,
                    "clients": len({j.client for j in self._active.values()}),
                    "max_queue": cfg.max_queue, "per_client": cfg.per_client,
                    "token_required": cfg.token is not None, **self.counts}

    def _finished(self, job: _Job) -> None:
        """Done-callback of every job (result, error or dropped): frees its slot and its files."""
        with self._lock:
            self._active.pop(job.number, None)
            job.task, job.files = None, {}
            if job.key is not None:
                self._expiry.append((time.monotonic() + self.config.keep_done_s, (job.client, job.key), job))

    def _forget_finished(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] < now:
            _, key, job = self._expiry.popleft()
            if self._keyed.get(key) is job:
                del self._keyed[key]

    def _work(self, gpu: int, evaluator: LocalEvaluator) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            if not job.future.set_running_or_notify_cancel():
                continue  # every request for it gave up (timeout) while the job waited
            if time.monotonic() > job.deadline:
                job.future.set_exception(FutureTimeout("timed out in the queue"))
                continue
            with self._lock:
                job.started = time.monotonic()
                self.counts["running"] += 1
            queue_s = job.started - job.arrived
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
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
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


def _digest(task: Task, files: dict[str, str], reward_kind: str) -> str:
    """What makes two requests the same evaluation (a retry may ask for another timeout)."""
    return hashlib.sha256(json.dumps([task.name, task.source, files, reward_kind], sort_keys=True).encode()).hexdigest()


def _handler(service: EvalService):
    token = service.config.token

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: the service logs jobs, not requests (nor their headers)
            pass

        def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            return token is None or bearer_ok(self.headers.get("Authorization"), token)

        def _refuse_unauthorized(self) -> None:
            self._send(401, {"error": "missing or wrong token: send Authorization: Bearer <token>, the service's "
                                      "secret (the client reads $CUDA_AGENT_EVAL_TOKEN_FILE or $CUDA_AGENT_EVAL_TOKEN)"},
                       {"WWW-Authenticate": 'Bearer realm="cuda-agent eval"'})

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/health":
                return self._send(200, {**service.health(), "authorized": self._authorized()})
            if not self._authorized():
                return self._refuse_unauthorized()
            self._send(404, {"error": f"no such endpoint: {self.path}"})

        def do_POST(self):
            length = self.headers.get("Content-Length") or "0"
            length = int(length) if length.isdigit() else -1
            if length <= 0 or length > MAX_BODY:
                self.close_connection = True  # the unread body would be taken for the next request
                return self._send(400, {"error": f"body must be 1..{MAX_BODY} bytes of JSON"}, {"Connection": "close"})
            raw = self.rfile.read(length)  # read even when refused, so the client sees the answer, not a reset
            if not self._authorized():
                return self._refuse_unauthorized()
            if self.path.rstrip("/") != "/v1/evaluate":
                return self._send(404, {"error": f"no such endpoint: {self.path}"})
            key = self.headers.get(KEY_HEADER)
            if key is not None and not KEY_PATTERN.fullmatch(key):
                return self._send(400, {"error": f"{KEY_HEADER} must be 1-128 of A-Z a-z 0-9 . _ : -"})
            try:
                task, files, kind, timeout_s = parse_request(json.loads(raw), service.config.job_timeout_s)
                job = service.submit(task, files, kind, timeout_s, client=self.client_address[0], key=key,
                                     digest=_digest(task, files, kind))
            except (ValueError, json.JSONDecodeError) as e:
                return self._send(400, {"error": str(e)})
            except Refused as e:
                return self._send(e.status, {"error": str(e)})
            try:
                result = service.wait(job, timeout_s + 1.0)  # +1 s: a job dropped in the queue says so first
            except FutureTimeout as e:
                return self._send(504, {"error": f"job did not finish in {timeout_s:g} s{': ' + str(e) if str(e) else ''}"})
            except Exception as e:  # noqa: BLE001 - the evaluation raised: no GPU (503), or a service bug (500)
                from ..sandbox import NoGpuError  # the sandbox's heavy module, imported by the worker that raised

                if isinstance(e, NoGpuError):
                    return self._send(503, {"error": f"no GPU on the evaluation host: {e}"})
                return self._send(500, {"error": f"{type(e).__name__}: {e}"})
            self._send(200, {"verdict": result.verdict.to_dict(), "reward": result.reward, "gpu": result.gpu,
                             "queue_s": result.queue_s, "eval_s": result.verdict.eval_s})

    return Handler
