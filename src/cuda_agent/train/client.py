"""Client of the evaluation service (stdlib urllib), with retries. Implements ``Evaluator``.

Retried: connection errors, 429 (queue full), 502/503/504 and 500, with exponential backoff;
not retried: 400 (the request is wrong). After ``retries`` failures it raises
:class:`EvalUnavailable`, never a made-up verdict. 503 "no GPU" is raised at once as
:class:`~cuda_agent.sandbox.NoGpuError` (retrying cannot help).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from ..sandbox import NoGpuError, Verdict
from ..tasks import Task
from .evaluator import EvalResult

RETRY_CODES = {429, 500, 502, 503, 504}


class EvalUnavailable(RuntimeError):
    """The evaluation service could not be reached or kept failing."""


@dataclass
class EvalClient:
    url: str = "http://127.0.0.1:8420"
    timeout_s: float = 1200.0
    """Per request, queueing on the server included."""
    retries: int = 5
    backoff_s: float = 1.0
    """First wait between tries; doubles each time, capped at 60 s."""

    def evaluate(self, task: Task, files: dict[str, str], reward_kind: str = "paper") -> EvalResult:
        body = {"task": {"name": task.name, "source": task.source}, "files": files, "reward": reward_kind,
                "timeout_s": self.timeout_s}
        d = self._post("/v1/evaluate", body)
        return EvalResult(verdict=Verdict.from_dict(d["verdict"]), reward=_reward(d.get("reward")), gpu=d.get("gpu"),
                          queue_s=float(d.get("queue_s") or 0.0))

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/v1/health", None)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", path, json.dumps(body).encode())

    def _request(self, method: str, path: str, data: bytes | None) -> dict[str, Any]:
        wait, last = self.backoff_s, ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s + 30) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                msg = _error_text(e)
                if e.code == 503 and "no GPU" in msg:
                    raise NoGpuError(msg) from None
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
