"""The OpenAI-compatible backend against a local scripted server on 127.0.0.1 (bounded requests,
stops by itself): native tool calls, the text fallback, retries on 500 and on a timeout, malformed
JSON arguments, and a server that stays down."""

import json

import pytest

pytest.importorskip("httpx")

from cuda_agent.agent import make_backend, run_episode  # noqa: E402

from .agent_support import ScriptedServer, completion, config, native_call, tiny_task, tool_messages  # noqa: E402


@pytest.fixture
def serve():
    servers = []

    def start(script):
        s = ScriptedServer(script)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def backend(server, **kw):
    opts = dict(base_url=server.url, model="tiny", backoff_s=0.01, backoff_max_s=0.05, timeout_s=5.0)
    opts.update(kw)
    return make_backend("openai", **opts)


def test_native_tool_calls_and_usage(tmp_path, serve):
    server = serve([
        (200, completion("Reading the task.", [native_call("read_file", '{"path": "model.py"}')], 1000, 30), 0),
        (200, completion("", [native_call("submit", "{}", id="call_2")], 1200, 10), 0),
    ])
    rec = run_episode(tiny_task(tmp_path), backend(server), config(tmp_path), run_dir=tmp_path / "run")
    assert rec["ended_by"] == "submitted"
    assert "class Model" in tool_messages(rec)[0]["content"]
    assert rec["tokens"] == {"prompt": 2200, "completion": 40, "total": 2240}
    first, second = (r["body"] for r in server.requests)
    assert first["model"] == "tiny" and first["tool_choice"] == "auto"
    assert {t["function"]["name"] for t in first["tools"]} >= {"bash", "verify", "submit"}
    # history goes back on the wire in OpenAI form: arguments as JSON text, tool results by id
    sent = second["messages"]
    assert sent[2]["tool_calls"][0]["function"]["arguments"] == '{"path": "model.py"}'
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "name": "read_file",
                       "content": tool_messages(rec)[0]["content"]}


def test_text_fallback_when_the_server_refuses_tools(tmp_path, serve):
    refusal = {"error": {"message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'}}
    server = serve([
        (400, refusal, 0),
        (200, completion('<tool_call>\n{"name": "glob", "arguments": {"pattern": "*.md"}}\n</tool_call>'), 0),
        (200, completion('Done.\n<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>'), 0),
    ])
    rec = run_episode(tiny_task(tmp_path), backend(server), config(tmp_path), run_dir=tmp_path / "run")
    assert rec["ended_by"] == "submitted"
    assert "SKILL.md" in tool_messages(rec)[0]["content"]
    retried, later = server.requests[1]["body"], server.requests[2]["body"]
    assert "tools" not in retried and "<tool_call>" in retried["messages"][0]["content"]
    # in text mode the history is text: calls as <tool_call> blocks, results as <tool_response> user turns
    roles = [m["role"] for m in later["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert "<tool_response" in later["messages"][3]["content"]
    # and the record is still in OpenAI form
    assert rec["messages"][2]["tool_calls"][0]["function"] == {"name": "glob", "arguments": {"pattern": "*.md"}}


def test_retry_after_500_and_after_a_timeout(tmp_path, serve):
    server = serve([
        (500, {"error": "overloaded"}, 0),
        (200, completion("", [native_call("glob", '{"pattern": "*"}')]), 2.0),  # slower than the 1 s timeout
        (200, completion("", [native_call("glob", '{"pattern": "*"}')]), 0),
        (503, {"error": "again"}, 0),
        (200, completion("", [native_call("submit", "{}")]), 0),
    ])
    model = backend(server, timeout_s=1.0)
    rec = run_episode(tiny_task(tmp_path), model, config(tmp_path), run_dir=tmp_path / "run")
    assert rec["ended_by"] == "submitted" and rec["turns"] == 2
    assert model.retries == 3 and len(server.requests) == 5


def test_malformed_arguments_cost_a_turn(tmp_path, serve):
    server = serve([
        (200, completion("", [native_call("write_file", '{"path": "kernels/a.cu", "content": "x}')]), 0),
        (200, completion("", [native_call("submit", "{}")]), 0),
    ])
    rec = run_episode(tiny_task(tmp_path), backend(server), config(tmp_path), run_dir=tmp_path / "run")
    assert rec["ended_by"] == "submitted" and rec["turns"] == 2
    assert "not valid JSON" in tool_messages(rec)[0]["content"]
    assert not (tmp_path / "run" / "workspace" / "kernels" / "a.cu").exists()
    # the raw text is what the record keeps for a call it could not parse
    assert rec["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"path": "kernels/a.cu", "content": "x}'
    # and it goes back to the server as the same text
    assert json.dumps(server.requests[1]["body"]["messages"][2]["tool_calls"][0]["function"]["arguments"]) == \
        json.dumps('{"path": "kernels/a.cu", "content": "x}')


def test_a_server_that_stays_down_ends_the_episode_cleanly(tmp_path, serve):
    server = serve([(500, {"error": "down"}, 0)] * 3)
    rec = run_episode(tiny_task(tmp_path), backend(server, max_retries=2), config(tmp_path), run_dir=tmp_path / "run")
    assert rec["ended_by"] == "backend_error" and "no reply after 3 attempts" in rec["final_message"]
    assert rec["turns"] == 1 and rec["reward"] == -1.0


def test_client_errors_are_not_retried(tmp_path, serve):
    server = serve([(401, {"error": "bad key"}, 0)])
    rec = run_episode(tiny_task(tmp_path), backend(server), config(tmp_path), run_dir=tmp_path / "run")
    assert rec["ended_by"] == "backend_error" and "HTTP 401" in rec["final_message"]
    assert len(server.requests) == 1
