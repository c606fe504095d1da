"""One recorded episode through every driver of the agent's episode engine.

tests/data/agent/conformance_episode.json is replayed by ``run_episode`` (the plain driver that the
training evaluations call), ``cuda-agent optimize --replay``, the ``bench --agent`` solver, TRL's
environment class (driven as TRL drives it: the reply's tokens parsed by TRL's ``parse_response``,
each call dispatched to the method of its name) and verl's token-level driver (token ids in and
out). Verification goes to one fake evaluation service everywhere. Each driver must yield the same
tool calls, the same tool results and the same final reward; the token-level driver's results are
compared after detokenization as well.
"""

import asyncio
import json

import pytest

from cuda_agent.sandbox import Verdict, paper_reward
from cuda_agent.tasks import load_task
from cuda_agent.train.agent_env import SessionConfig, agent_config, start_episode
from cuda_agent.train.evaluator import EvalResult
from cuda_agent.train.solution_io import read_files

from .conftest import EXAMPLES, ROOT

RECORDING = ROOT / "tests" / "data" / "agent" / "conformance_episode.json"
STEPS = json.loads(RECORDING.read_text())["steps"]
TASK_PATH = EXAMPLES / "swish" / "task.py"
QWEN3 = ROOT / "tests" / "data" / "tokenizers" / "qwen3"


class FakeService:
    """The evaluation service's contract (an Evaluator): 'correct', 1.5x torch.compile for a
    model_new.py that says 'fast path', 0.9x for any other."""

    def __init__(self):
        self.files: list[dict[str, str]] = []

    def evaluate(self, task, files, reward_kind="paper") -> EvalResult:
        self.files.append(dict(files))
        fast = "fast path" in files.get("model_new.py", "")
        v = Verdict(verdict="correct", task=task.name, ms=1.0, eager_ms=2.0, compile_ms=1.5 if fast else 0.9,
                    speedup_vs_eager=2.0, speedup_vs_compile=1.5 if fast else 0.9)
        v.reward = paper_reward(v)
        return EvalResult(verdict=v, reward=v.reward)

    def sandbox_evaluate(self, task, solution, config=None) -> Verdict:
        """The same service in place of the in-process sandbox, for the command-line drivers."""
        return self.evaluate(task, read_files(solution.path)).verdict


def _session(tmp_path) -> SessionConfig:
    return SessionConfig(max_turns=150, run_root=str(tmp_path / "episodes"))


def _from_record(record) -> tuple[list, list, float]:
    calls = [(c["function"]["name"], c["function"]["arguments"])
             for m in record["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    return calls, results, record["reward"]


def _reply_text(step) -> str:
    """A recorded turn as a Qwen3 model writes it (hermes <tool_call> JSON, then <|im_end|>)."""
    (call,) = step["tool_calls"]
    body = json.dumps({"name": call["name"], "arguments": call["arguments"]})
    return f"{step['content']}\n<tool_call>\n{body}\n</tool_call><|im_end|>"


# ---------------------------------------------------------------------------- the drivers

def plain_driver(tmp_path, service, monkeypatch):
    from cuda_agent.agent import run_episode
    from cuda_agent.agent.backends.replay import ReplayBackend, ReplayConfig
    from cuda_agent.train.agent_env import evaluator_verifier

    task = load_task(TASK_PATH, name="swish")
    model = ReplayBackend(ReplayConfig(path=str(RECORDING)))
    return _from_record(run_episode(task, model, agent_config(_session(tmp_path)), run_dir=tmp_path / "run",
                                    verifier=evaluator_verifier(service)))


def optimize_driver(tmp_path, service, monkeypatch):
    from cuda_agent.agent import environment
    from cuda_agent.cli import main

    monkeypatch.setattr(environment, "evaluate", service.sandbox_evaluate)
    out = tmp_path / "optimize"
    assert main(["optimize", str(TASK_PATH), "--replay", str(RECORDING), "--max-turns", "150", "--no-stop-at-target",
                 "--out", str(out), "--quiet"]) == 0
    (record,) = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    return _from_record(record)


def bench_driver(tmp_path, service, monkeypatch):
    from cuda_agent.agent import environment, solve

    monkeypatch.setattr(environment, "evaluate", service.sandbox_evaluate)
    task = load_task(TASK_PATH, name="swish")
    _, trajectory = solve(task, tmp_path / "bench", ["--replay", str(RECORDING), "--max-turns", "150",
                                                     "--no-stop-at-target", "--quiet"])
    (record,) = [json.loads(line) for line in trajectory.read_text().splitlines()]
    return _from_record(record)


def trl_driver(tmp_path, service, monkeypatch):
    pytest.importorskip("trl")
    from transformers import AutoTokenizer
    from trl.chat_template_utils import parse_response

    from cuda_agent.train.trl_env import CudaAgentEnv

    task = load_task(TASK_PATH, name="swish")
    cfg = _session(tmp_path)
    tok = AutoTokenizer.from_pretrained(QWEN3)
    prompt = tok.apply_chat_template(start_episode(task, cfg, service).messages, tokenize=True, return_dict=False,
                                     add_generation_prompt=True, enable_thinking=False)
    env = CudaAgentEnv(lambda row: start_episode(task, cfg, service))
    env.reset(task_name="swish")
    calls, results = [], []
    for step in STEPS:  # TRL's tool loop: parse the completion's tokens, call the method of each tool call
        parsed = parse_response(tok, tok.encode(_reply_text(step), add_special_tokens=False), prefix=prompt)
        for call in parsed["tool_calls"]:
            name, args = call["function"]["name"], call["function"]["arguments"]
            calls.append((name, args))
            results.append(str(getattr(env, name)(**args)))
    return calls, results, env.get_reward()


def verl_driver(tmp_path, service, monkeypatch):
    from transformers import AutoTokenizer

    from cuda_agent.train.cluster.episode import Generated, run_episode

    task = load_task(TASK_PATH, name="swish")
    tok = AutoTokenizer.from_pretrained(QWEN3)
    replies = [tok.encode(_reply_text(s), add_special_tokens=False) for s in STEPS]
    prompts = []

    async def generate(prompt_ids, params):
        prompts.append(list(prompt_ids))
        ids = replies[len(prompts) - 1]
        return Generated(ids, [-0.5] * len(ids))

    episode = start_episode(task, _session(tmp_path), service)
    ep = asyncio.run(run_episode(generate, tok, episode, {}, response_length=1_000_000,
                                 chat_template_kwargs={"enable_thinking": False}))
    calls, results, reward = _from_record(ep.record)
    # token level: on-policy prompts, log-probs where the policy wrote, every result in the observation tokens
    assert all(p == (ep.prompt_ids + ep.response_ids)[:len(p)] for p in prompts)
    assert len(ep.response_logprobs) == len(ep.response_ids) == len(ep.response_mask)
    assert {lp for lp, m in zip(ep.response_logprobs, ep.response_mask) if m} == {-0.5}
    assert {lp for lp, m in zip(ep.response_logprobs, ep.response_mask) if not m} == {0.0}
    observed = tok.decode([t for t, m in zip(ep.response_ids, ep.response_mask) if not m])
    policy = tok.decode([t for t, m in zip(ep.response_ids, ep.response_mask) if m])
    assert "<think>\n\n</think>" in tok.decode(ep.prompt_ids)[-40:]  # enable_thinking=False reached the template
    assert policy == "".join(tok.decode(r) for r in replies[:-1]) + tok.decode(replies[-1])
    at = 0
    for text in results[:-1]:  # the last (submit's) result ends the episode and is not rendered
        at = observed.index(text, at) + len(text)
    return calls, results, reward


DRIVERS = {"run_episode": plain_driver, "optimize": optimize_driver, "bench --agent": bench_driver,
           "trl": trl_driver, "verl": verl_driver}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    service = FakeService()
    with pytest.MonkeyPatch.context() as mp:
        calls, results, reward = plain_driver(tmp_path_factory.mktemp("reference"), service, mp)
    return calls, results, reward, service.files


def test_the_recording_exercises_the_rules(reference):
    calls, results, reward, files = reference
    assert [name for name, _ in calls] == [s["tool_calls"][0]["name"] for s in STEPS]
    assert results[3].startswith('{\n "verdict": "correct"') and "new best" in results[3]  # the service's verdict
    assert results[6].startswith("refused: you made this exact call 3 times")
    assert results[-1].startswith("verified the last changes first:") and "submitted." in results[-1]
    assert len(files) == 4 and "slow path" in files[-1]["model_new.py"]  # 3 verifies + verify on submit
    assert reward == 3.0  # the best (fast) solution: 2x eager, 1.5x compile


@pytest.mark.parametrize("driver", [d for d in DRIVERS if d != "run_episode"])
def test_every_driver_gives_the_same_episode(driver, reference, tmp_path, monkeypatch):
    service = FakeService()
    calls, results, reward = DRIVERS[driver](tmp_path, service, monkeypatch)
    ref_calls, ref_results, ref_reward, ref_files = reference
    assert calls == ref_calls
    assert results == ref_results
    assert reward == ref_reward
    assert service.files == ref_files
