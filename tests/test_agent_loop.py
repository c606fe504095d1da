"""The loop, driven by the replay backend: bad model output costs a turn with a clear message, never
a crash; loops are refused; budgets end the episode; the context is fitted; progress is printed."""

import io
import json

from cuda_agent.agent import make_backend, run_episode
from cuda_agent.agent.config import ContextConfig
from cuda_agent.agent.context import estimate_tokens, fit_context
from cuda_agent.agent.progress import ConsoleProgress

from .agent_support import call, config, tiny_task, tool_messages


def episode(tmp_path, steps, **cfg):
    return run_episode(tiny_task(tmp_path), make_backend("replay", steps=steps), config(tmp_path, **cfg),
                       run_dir=tmp_path / "run")


def test_each_kind_of_bad_output_costs_one_turn_with_a_message(tmp_path):
    steps = [
        {"content": ""},                                                          # empty reply
        "I think we should write a kernel.",                                      # text, no call
        '<tool_call>{"name": "read_file", "arguments": {"path": </tool_call>',    # broken text call
        {"tool_calls": [{"name": "read_file", "arguments": '{"path": "model.py"'}]},   # bad JSON arguments
        call("launch_missiles", target="moon"),                                   # unknown tool
        call("read_file"),                                                        # missing argument
        call("read_file", path="model.py", colour="red"),                         # unknown argument
        call("write_file", path="kernels/x.cu", content="x" * 500_000),          # oversized write
        {"tool_calls": [{"name": "read_file", "arguments": "[1, 2]"}]},           # arguments not an object
        call("submit", summary="done"),
    ]
    rec = episode(tmp_path, steps)
    assert rec["ended_by"] == "submitted" and rec["turns"] == len(steps)
    feedback = [m["content"] for m in rec["messages"][2:] if m["role"] in ("user", "tool")]
    expected = ["reply was empty", "No tool call found", "block is not valid JSON", "not valid JSON", "unknown tool",
                "missing required argument", "unknown argument", "limit", "must be a JSON object", "submitted"]
    assert len(feedback) == len(expected)
    for text, want in zip(feedback, expected):
        assert want in text, (want, text)
    assert sum(1 for s in rec["steps"] if s.get("error")) == 8  # every bad turn but the oversized write (it ran)


def test_identical_calls_are_refused_then_the_episode_ends(tmp_path):
    same = call("read_file", path="model.py")
    rec = episode(tmp_path, [same] * 10, loop_repeats=3)
    tools = [m["content"] for m in tool_messages(rec)]
    assert all("class Model" in t for t in tools[:3])
    assert all(t.startswith("refused") for t in tools[3:])
    assert rec["ended_by"] == "loop" and rec["turns"] == 6


def test_a_changed_workspace_is_not_a_loop(tmp_path):
    steps = []
    for i in range(5):
        steps += [call("read_file", path="notes.txt"), call("write_file", path="notes.txt", content=f"v{i}")]
    steps[0] = call("write_file", path="notes.txt", content="start")
    rec = episode(tmp_path, steps + [call("submit")])
    assert rec["ended_by"] == "submitted"
    assert not any(m["content"].startswith("refused") for m in tool_messages(rec))


def test_turn_budget_and_consecutive_errors(tmp_path):
    rec = episode(tmp_path, [call("glob", pattern="*")] * 2 + ["chatter"] * 10, max_turns=5)
    assert rec["ended_by"] == "max_turns" and rec["turns"] == 5
    rec = episode(tmp_path, ["chatter"] * 10, max_consecutive_errors=4)
    assert rec["ended_by"] == "format_errors" and rec["turns"] == 4


def test_token_and_wall_budgets(tmp_path):
    rec = episode(tmp_path, [call("glob", pattern="*")] * 5, max_tokens=1)
    assert rec["ended_by"] == "max_tokens" and rec["turns"] == 1
    rec = episode(tmp_path, [call("bash", command="sleep 0.3")] * 5, max_wall_s=0.2)
    assert rec["ended_by"] == "max_wall_s"


def test_replay_running_out_ends_the_episode(tmp_path):
    rec = episode(tmp_path, [call("glob", pattern="*")])
    assert rec["ended_by"] == "replay_exhausted" and "no turn left" in rec["final_message"]


def test_several_calls_in_one_reply_and_the_per_turn_cap(tmp_path):
    many = {"tool_calls": [{"name": "glob", "arguments": {"pattern": f"{c}*"}} for c in "abcdefghij"]}
    rec = episode(tmp_path, [many, call("submit")])
    results = [m["content"] for m in tool_messages(rec)]
    assert len(results) == 11 and sum("not run: at most 8" in r for r in results) == 2
    ids = [c["id"] for c in rec["messages"][2]["tool_calls"]]
    assert [m["tool_call_id"] for m in tool_messages(rec)[:10]] == ids


def test_text_format_calls_are_parsed(tmp_path):
    qwen_coder = ("<tool_call>\n<function=write_file>\n<parameter=path>\nkernels/k.cu\n</parameter>\n"
                  "<parameter=content>\n__global__ void k() {}\n</parameter>\n</function>\n</tool_call>")
    hermes = 'Let me look.\n<tool_call>\n{"name": "read_file", "parameters": {"path": "kernels/k.cu"}}\n</tool_call>'
    rec = episode(tmp_path, [qwen_coder, hermes, call("submit")])
    out = [m["content"] for m in tool_messages(rec)]
    assert out[0].startswith("created kernels/k.cu") and "__global__ void k() {}" in out[1]
    assert rec["messages"][4]["content"] == "Let me look."


def test_context_is_fitted_without_breaking_tool_pairs():
    cfg = ContextConfig(context_tokens=3000, reserve_tokens=500, keep_last_turns=2, old_output_chars=200)
    msgs = [{"role": "system", "content": "S" * 400}, {"role": "user", "content": "T" * 400}]
    for i in range(30):
        args = {"path": f"kernels/k{i}.cu"}
        msgs.append({"role": "assistant", "content": f"turn {i}", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "write_file", "arguments": args}}]})
        content = json.dumps({"verdict": "incorrect"}) if i % 5 == 0 else "R" * 2000
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "name": "write_file", "content": content})
    view, info = fit_context(msgs, cfg)
    assert estimate_tokens(view, cfg.chars_per_token) <= 2500
    assert view[0] == msgs[0] and view[1]["content"].startswith("T" * 400)
    assert info.dropped_turns > 0 and "oldest turns were dropped" in view[1]["content"]
    assert "write_file kernels/k0.cu -> incorrect" in view[1]["content"]
    assert view[-2:] == msgs[-2:]  # the newest turns untouched
    ids = {c["id"] for m in view for c in m.get("tool_calls", [])}
    assert all(m["tool_call_id"] in ids for m in view if m["role"] == "tool")
    assert msgs[3]["content"] == json.dumps({"verdict": "incorrect"}) and len(msgs[5]["content"]) == 2000
    small, info = fit_context(msgs[:6], cfg)
    assert small == msgs[:6] and info.dropped_turns == 0


def test_long_episodes_are_fitted_into_the_window(tmp_path):
    big = "y" * 5000
    steps = [call("write_file", path=f"n{i}.txt", content=big) for i in range(12)]
    steps += [call("read_file", path=f"n{i}.txt") for i in range(12)] + [call("submit")]
    cfg = config(tmp_path)
    cfg.context.context_tokens, cfg.context.reserve_tokens = 12_000, 2_000
    rec = run_episode(tiny_task(tmp_path), make_backend("replay", steps=steps), cfg, run_dir=tmp_path / "run")
    assert rec["ended_by"] == "submitted"
    assert max(s["context_tokens"] for s in rec["steps"]) <= 10_000
    assert any(s["context_dropped_turns"] for s in rec["steps"])
    assert len(rec["messages"]) == 2 + 2 * len(steps)  # the record keeps everything


def test_progress_lines(tmp_path):
    out = io.StringIO()
    run_episode(tiny_task(tmp_path), make_backend("replay", steps=[call("glob", pattern="*"), "oops", call("submit")]),
                config(tmp_path), run_dir=tmp_path / "run", progress=ConsoleProgress(use_rich=False, stream=out))
    text = out.getvalue()
    assert "[turn   1] glob" in text and "No tool call found" in text and "done (submitted) after 3 turns" in text


def test_episode_json_is_saved_every_turn(tmp_path):
    rec = episode(tmp_path, [call("glob", pattern="*"), call("submit")])
    saved = json.loads((tmp_path / "run" / "episode.json").read_text())
    assert saved["ended_by"] == "submitted" and saved["messages"] == rec["messages"]
