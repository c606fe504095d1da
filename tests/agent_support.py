"""Shared pieces of the agent tests: a small task, configs, and a local OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cuda_agent.agent import AgentConfig
from cuda_agent.sandbox import SandboxConfig
from cuda_agent.tasks import load_task

TINY_TASK = '''"""Swish on a small tensor (CPU tests)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return []
'''

# a ModelNew that passes the static rules and has nothing to build: verify gets as far as the GPU
IDENTITY_MODEL_NEW = '''import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
'''

THREAD_MODEL_NEW = '''import threading

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''

BROKEN_CU = '__global__ void swish_kernel(const float* x, float* y, long n) {\n  long i = threadIdx.x;\n  if (i < n) { y[i] = x[i] +; }\n}\n'


def tiny_task(tmp_path: Path):
    path = tmp_path / "tiny_swish.py"
    path.write_text(TINY_TASK)
    return load_task(path)


def config(tmp_path: Path, **overrides) -> AgentConfig:
    cfg = AgentConfig(sandbox=SandboxConfig(cache_dir=tmp_path / "cache"))
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def call(name: str, **arguments) -> dict:
    """One replay step holding one native tool call."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tool_messages(record: dict) -> list[dict]:
    return [m for m in record["messages"] if m["role"] == "tool"]


class ScriptedServer:
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 answering from a script.

    Each script entry is (status, body dict or None, delay seconds). It answers at most
    ``len(script) + 2`` requests, then stops by itself (and on ``close``); every request body is kept.
    """

    def __init__(self, script: list[tuple[int, dict | None, float]]):
        self.script = list(script)
        self.requests: list[dict] = []
        self.limit = len(script) + 2
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.requests.append({"path": self.path, "body": body})
                if len(outer.requests) >= outer.limit:
                    threading.Thread(target=outer.server.shutdown, daemon=True).start()
                status, reply, delay = outer.script.pop(0) if outer.script else (500, {"error": "script done"}, 0)
                if delay:
                    time.sleep(delay)
                data = json.dumps(reply if reply is not None else {}).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def completion(content: str = "", tool_calls: list[dict] | None = None, prompt_tokens: int = 100,
               completion_tokens: int = 20) -> dict:
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message,
                                                                  "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


def native_call(name: str, arguments: str, id: str = "call_1") -> dict:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
