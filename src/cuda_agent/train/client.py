"""Client of the evaluation service (stdlib urllib), with retries. Implements ``Evaluator``.

Retried: connection errors, 429 (queue full, or this client's limit), 502/503/504 and 500, with
exponential backoff; not retried: 400 (the request is wrong), 401 (raised at once as
:class:`EvalUnauthorized`: the token is missing or wrong) and 422. After ``retries`` failures it
raises :class:`EvalUnavailable`, never a made-up verdict. 503 "no GPU" is raised at once as
:class:`~cuda_agent.sandbox.NoGpuError` (retrying cannot help).

Every evaluation carries one ``Idempotency-Key``, the same on each retry, so a retry after a 504
or a lost connection joins the evaluation the service is still running instead of starting another.
The token (:mod:`.auth`) comes from ``token=``, else ``$CUDA_AGENT_EVAL_TOKEN_FILE``, else
``$CUDA_AGENT_EVAL_TOKEN``; it is sent as ``Authorization: Bearer`` and never shown by ``repr``.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..sandbox.verdict import Verdict
from ..tasks import Task
from .auth import TOKEN_ENV, TOKEN_FILE_ENV, read_token
from .evaluator import EvalResult

RETRY_CODES = {429, 500, 502, 503, 504}


class EvalUnavailable(RuntimeError):
    """The evaluation service could not be reached or kept failing."""


class EvalUnauthorized(EvalUnavailable):
    """The service wants a token this client does not have (or has wrong): retrying cannot help."""


@dataclass
class EvalClient:
    url: str = "http://127.0.0.1:8420"
    timeout_s: float = 1200.0
    """Per request, queueing on the server included."""
    retries: int = 5
    backoff_s: float = 1.0
    """First wait between tries; doubles each time, capped at 60 s."""
    token: str | None = field(default=None, repr=False)
    """The service's shared secret; None: read from the environment (see the module doc); "": send none."""

    def __post_init__(self):
        if self.token is None:
            self.token = read_token()

    def evaluate(self, task: Task, files: dict[str, str], reward_kind: str = "paper") -> EvalResult:
        body = {"task": {"name": task.name, "source": task.source}, "files": files, "reward": reward_kind,
                "timeout_s": self.timeout_s}
        key = uuid.uuid4().hex  # one per evaluation, reused by every retry of it
        d = self._request("POST", "/v1/evaluate", json.dumps(body).encode(), {"Idempotency-Key": key})
        return EvalResult(verdict=Verdict.from_dict(d["verdict"]), reward=_reward(d.get("reward")), gpu=d.get("gpu"),
                          queue_s=float(d.get("queue_s") or 0.0))

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/v1/health", None)

    def check(self) -> dict[str, Any]:
        """The service's health, raising :class:`EvalUnauthorized` when it would refuse this client's
        token: a launcher calls it before training starts, not twenty minutes in."""
        h = self.health()
        if h.get("token_required") and not h.get("authorized"):
            raise EvalUnauthorized(f"{self.url}: the evaluation service requires a token and "
                                   f"{'refuses ours' if self.token else 'we have none'} "
                                   f"(set ${TOKEN_FILE_ENV} or ${TOKEN_ENV} to the service's secret)")
        return h

    def _request(self, method: str, path: str, data: bytes | None,
                 headers: dict[str, str] | None = None) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", **(headers or {})}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        wait, last = self.backoff_s, ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s + 30) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                msg = _error_text(e)
                if e.code == 503 and "no GPU" in msg:
                    from ..sandbox import NoGpuError  # the sandbox's heavy module: only when it is raised

                    raise NoGpuError(msg) from None
                if e.code == 401:
                    raise EvalUnauthorized(f"{self.url}{path}: refused (401): {msg}") from None
                if e.code not in RETRY_CODES:
                    raise ValueError(f"evaluation service refused the request ({e.code}): {msg}") from None
                last = f"HTTP {e.code}: {msg}"
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
                last = f"{type(e).__name__}: {e}"
            if attempt < self.retries:
                time.sleep(wait)
                wait = min(wait * 2, 60.0)
        raise EvalUnavailable(f"{self.url}{path}: gave up after {self.retries + 1} tries; last: {last}")


def _reward(value: Any) -> float | None:
    """The service's reward: a number, or null for a harness_error (never turned into a number here)."""
    return None if value is None else float(value)


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        return json.loads(e.read()).get("error", "")
    except Exception:  # noqa: BLE001 - a non-JSON error body
        return str(e)
