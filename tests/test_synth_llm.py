"""The optional LLM composer, against a fake OpenAI-compatible server on 127.0.0.1 only."""

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.synth.catalog import build_catalog  # noqa: E402
from cuda_agent.synth.filters import check_cpu  # noqa: E402
from cuda_agent.synth.llm import LLMComposer, extract_code  # noqa: E402

REPLY = '''Here is the fused module:
```python
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.tanh(self.linear(x)) * 2.0


batch_size = 8
in_features = 32
out_features = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
```
'''
MAX_REQUESTS = 4


@pytest.fixture
def fake_server():
    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append((self.path, body))
            answer = REPLY if len(requests) < MAX_REQUESTS else "sorry, no code"
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    server.timeout = 0.2  # handle_request() returns after this when idle
    stop = threading.Event()

    def serve():  # bounded: at most MAX_REQUESTS requests, and stops at teardown
        while not stop.is_set() and len(requests) < MAX_REQUESTS:
            server.handle_request()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", requests
    stop.set()
    thread.join(timeout=5)
    server.server_close()


def test_extract_code():
    assert extract_code("```python\nx = 1\n```").strip() == "x = 1"
    assert extract_code("x = 2").strip() == "x = 2"


def test_llm_draft_goes_through_the_rubric(fake_server):
    url, requests = fake_server
    comp = LLMComposer(url, "fake-model", build_catalog(), timeout=10)
    draft = comp.compose(random.Random("llm:1"), 2)
    assert draft is not None and len(draft.ops) == 2
    path, body = requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "fake-model"
    assert all(op in body["messages"][0]["content"] for op in draft.ops)
    assert draft.input_shapes == [(8, 32)] and draft.output_shape == (8, 16)
    assert check_cpu(draft.code).ok


def test_reply_without_a_module_is_a_rejected_attempt(fake_server):
    url, requests = fake_server
    comp = LLMComposer(url, "fake-model", build_catalog(), timeout=10)
    drafts = [comp.compose(random.Random(f"llm:{i}"), 2) for i in range(MAX_REQUESTS)]
    assert all(d is not None for d in drafts[:-1]) and drafts[-1] is None
    assert len(requests) == MAX_REQUESTS
