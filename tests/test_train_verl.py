"""The verl recipe without verl: the token-level agent loop against a local
OpenAI-compatible server on 127.0.0.1 (only the LLM is scripted; tools and sandbox are real),
the reward function and the parquet rows. What needs verl/Ray/vLLM is listed in docs/train.md."""

import asyncio
import json
import threading
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

yaml = pytest.importorskip("yaml")

from cuda_agent.tasks import load_task  # noqa: E402
from cuda_agent.train.cluster import agent_loop  # noqa: E402
from cuda_agent.train.solution_io import read_files, render_files  # noqa: E402

from .conftest import EXAMPLES, ROOT, SOLUTIONS  # noqa: E402

CONFIGS = ROOT / "configs" / "verl"
SWISH = load_task(EXAMPLES / "swish" / "task.py", name="swish")


# The configs' own checks (Hydra against the installed verl) are in test_verl_config.py.


def test_agent_loop_imports_without_verl():
    if agent_loop.HAVE_VERL:
        pytest.skip("verl is installed here")
    with pytest.raises(ImportError, match="inside verl"):
        agent_loop.CudaAgentLoop()
    entry = yaml.safe_load((CONFIGS / "agent_loops.yaml").read_text())[0]
    assert entry["_target_"] == "cuda_agent.train.cluster.agent_loop.CudaAgentLoop"


def test_reward_function_for_single_turn_rows(monkeypatch):
    from cuda_agent.train.cluster.reward import compute_score

    monkeypatch.delenv("CUDA_AGENT_EVAL_URL", raising=False)
    out = compute_score("cuda_agent", render_files(read_files(SOLUTIONS / "cheat_torch_fallback")), "",
                        {"task_name": "swish", "task_source": SWISH.source})
    assert out["score"] == -1.0 and out["pass"] == 0.0


def test_parquet_rows(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from cuda_agent.train.cluster.dataset import verl_rows, write_parquet

    path = write_parquet(verl_rows([SWISH]), tmp_path / "train.parquet")
    row = pq.read_table(path).to_pylist()[0]
    assert row["agent_name"] == "cuda_agent" and row["extra_info"]["task_name"] == "swish"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and SWISH.source.strip() in row["prompt"][1]["content"]
    single = verl_rows([SWISH], mode="single_turn")[0]
    assert single["agent_name"] == "single_turn_agent"


# ---------------------------------------------------------------------------- the loop vs a local server

def _call(name, **args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


class _ScriptedCompletions:
    """An OpenAI-compatible /v1/completions server on 127.0.0.1 that answers from a script."""

    def __init__(self, replies):
        self.replies, self.prompts = list(replies), []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.prompts.append(body["prompt"])
                text = outer.replies.pop(0) if outer.replies else _call("submit")
                data = json.dumps({"choices": [{"text": text, "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@dataclass
class OpenAICompletions:
    """``generate`` for the token-level driver over an OpenAI-compatible ``/v1/completions``
    endpoint that takes token-id prompts (vLLM, SGLang; here the scripted server)."""

    url: str
    model: str
    tokenizer: object
    max_tokens: int = 4096
    timeout_s: float = 600.0

    async def __call__(self, prompt_ids, sampling_params):
        from cuda_agent.train.cluster.episode import Generated

        body = {"model": self.model, "prompt": prompt_ids, "logprobs": 0,
                "max_tokens": int(sampling_params.get("max_tokens", self.max_tokens)),
                "temperature": float(sampling_params.get("temperature", 1.0)),
                "top_p": float(sampling_params.get("top_p", 1.0)), "skip_special_tokens": False}
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(None, self._post, body)
        choice = data["choices"][0]
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if choice.get("token_ids"):
            return Generated(list(choice["token_ids"]), logprobs)
        ids = self.tokenizer.encode(choice.get("text") or "", add_special_tokens=False)
        if choice.get("finish_reason") == "stop" and self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return Generated(ids, logprobs + [0.0] * (len(ids) - len(logprobs)) if logprobs else None)

    def _post(self, body):
        req = urllib.request.Request(self.url.rstrip("/") + "/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read())


def test_episode_against_local_openai_server(tmp_path, cache_dir):
    pytest.importorskip("trl")  # the tiny tokenizer uses TRL's Qwen2.5 chat template
    from cuda_agent.sandbox import SandboxConfig
    from cuda_agent.train.agent_env import SessionConfig, close_episode, start_episode
    from cuda_agent.train.cluster.episode import run_episode
    from cuda_agent.train.evaluator import LocalEvaluator
    from cuda_agent.train.tiny import make_tokenizer

    cheat = read_files(SOLUTIONS / "cheat_torch_fallback")["model_new.py"]
    replies = ["Let me write it.\n" + _call("write_file", path="model_new.py", content=cheat),
               "hmm, thinking without a call",
               _call("launch_rockets"),
               _call("submit", summary="done")]
    server = _ScriptedCompletions(replies)
    tok = make_tokenizer([cheat, SWISH.source] + replies, 800)
    cfg = SessionConfig(max_turns=10, run_root=str(tmp_path))
    episode = start_episode(SWISH, cfg, LocalEvaluator(SandboxConfig(cache_dir=cache_dir)))
    gen = OpenAICompletions(server.url, "scripted", tok)
    try:
        ep = asyncio.run(run_episode(gen, tok, episode, {"temperature": 1.0}, response_length=100_000))
    finally:
        server.close()
        close_episode(episode, cfg)
    assert ep.ended_by == "submitted" and ep.num_turns == 4 and ep.submitted
    assert ep.reward == -1.0 and ep.record["verdicts"][-1]["verdict"]["verdict"] == "rejected"  # verified on submit
    assert len(ep.response_ids) == len(ep.response_mask)
    assert ep.response_logprobs is None  # the scripted server sends none
    # on-policy: every request's prompt is exactly the previous prompt + generated + observation tokens
    for k, prompt in enumerate(server.prompts):
        assert prompt == (ep.prompt_ids + ep.response_ids)[:len(prompt)]
    actor = tok.decode([t for t, m in zip(ep.response_ids, ep.response_mask) if m])
    obs = tok.decode([t for t, m in zip(ep.response_ids, ep.response_mask) if not m])
    assert "write_file" in actor and "submit" in actor and "<tool_response>" not in actor
    assert "created model_new.py" in obs or "model_new.py" in obs
    assert "No tool call found" in obs and "unknown tool" in obs
    roles = [m["role"] for m in ep.record["messages"]]
    assert roles[:3] == ["system", "user", "assistant"] and roles[-1] == "tool"
