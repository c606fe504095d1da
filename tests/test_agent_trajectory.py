"""Trajectory records: JSONL round trip, replay of a recorded episode, and the TRL conversational
tool-calling format (checked with `datasets` and a chat template when they are installed)."""

import json

import pytest

from cuda_agent.agent import FORMAT_VERSION, load_jsonl, make_backend, run_episode, to_trl, write_trl_jsonl
from cuda_agent.agent.trajectory import TrajectoryError, check_record

from .agent_support import call, config, tiny_task

STEPS = [
    {"content": "Let me read the task.", "tool_calls": [{"name": "read_file", "arguments": {"path": "model.py"}}]},
    call("write_file", path="kernels/k.cu", content="__global__ void k(float* y) { y[0] = 1.f; }\n"),
    {"tool_calls": [{"name": "bash", "arguments": '{"command": "ls'}]},     # malformed: recorded raw
    '<tool_call>{"name": "grep", "arguments": {"pattern": "global"}}</tool_call>',
    "thinking out loud",
    call("submit", summary="a start"),
]


@pytest.fixture
def recorded(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    rec = run_episode(tiny_task(tmp_path), make_backend("replay", steps=STEPS),
                      config(tmp_path, verify_on_submit=False), run_dir=tmp_path / "run", trajectories=path)
    return rec, path


def test_jsonl_round_trip(recorded):
    rec, path = recorded
    (loaded,) = load_jsonl(path)
    assert loaded == json.loads(json.dumps(rec))
    assert loaded["format_version"] == FORMAT_VERSION
    for key in ("episode_id", "task", "model", "config", "ended_by", "messages", "tools", "steps", "verdicts",
                "timings", "tokens", "best", "reward"):
        assert key in loaded, key
    assert set(loaded["timings"]) == {"wall_s", "llm_s", "tool_s", "sandbox_s", "overhead_s"}
    assert len(loaded["steps"]) == loaded["turns"] == len(STEPS)
    with pytest.raises(TrajectoryError, match="format_version"):
        check_record({**loaded, "format_version": 99})


def test_a_recorded_trajectory_replays_to_the_same_calls(recorded, tmp_path):
    rec, path = recorded
    again = run_episode(tiny_task(tmp_path), make_backend("replay", path=str(path)),
                        config(tmp_path, verify_on_submit=False), run_dir=tmp_path / "run2")

    def calls(r):
        return [(c["function"]["name"], c["function"]["arguments"]) for m in r["messages"] for c in m.get("tool_calls", [])]

    assert calls(again) == calls(rec) and again["ended_by"] == "submitted"
    assert [m["content"] for m in again["messages"][3:] if m["role"] == "tool"] == \
        [m["content"] for m in rec["messages"][3:] if m["role"] == "tool"]


def test_trl_conversational_tool_calling_format(recorded, tmp_path):
    rec, _ = recorded
    example = to_trl(rec)
    assert set(example) == {"messages", "tools"}
    msgs = example["messages"]
    assert [m["role"] for m in msgs[:4]] == ["system", "user", "assistant", "tool"]
    assert msgs[2]["tool_calls"] == [{"id": msgs[2]["tool_calls"][0]["id"], "type": "function",
                                      "function": {"name": "read_file", "arguments": {"path": "model.py"}}}]
    assert msgs[3]["tool_call_id"] == msgs[2]["tool_calls"][0]["id"] and msgs[3]["name"] == "read_file"
    assert all(isinstance(m["content"], str) for m in msgs)
    assert example["tools"][0] == {"type": "function", "function": {
        "name": "bash", "description": example["tools"][0]["function"]["description"],
        "parameters": example["tools"][0]["function"]["parameters"]}}
    assert example["tools"][0]["function"]["parameters"]["type"] == "object"
    out = tmp_path / "sft.jsonl"
    assert write_trl_jsonl([rec], out) == 1 and write_trl_jsonl([rec], out, min_reward=1) == 0


def test_trajectories_load_with_datasets(recorded):
    datasets = pytest.importorskip("datasets")
    rec, path = recorded
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    row = ds[0]
    assert row["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"path": "model.py"}
    assert row["messages"] == json.loads(json.dumps(rec["messages"]))
    assert [t["function"]["name"] for t in row["tools"]] == [t["function"]["name"] for t in rec["tools"]]


def test_a_chat_template_renders_the_example_with_tools(recorded):
    """What TRL's SFTTrainer does with each example: apply_chat_template(messages, tools=tools)."""
    pytest.importorskip("transformers")
    from .test_agent_local import TOOLS_TEMPLATE, make_model

    rec, path = recorded
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(make_model(path.parent / "lm", True, True, TOOLS_TEMPLATE))
    example = to_trl(rec)
    text = tok.apply_chat_template(example["messages"], tools=example["tools"], tokenize=False)
    assert '<tool_call>{"name": "read_file", "arguments": {"path": "model.py"}}</tool_call>' in text
    assert '"name": "verify"' in text and "<|tool|>" in text
