"""Data plumbing: prompts, completion parsing, trajectories -> SFT / value rows, token masks."""

import json

import pytest

from cuda_agent.tasks import load_task
from cuda_agent.train import data
from cuda_agent.train.solution_io import parse_completion, read_files, render_files, write_solution
from cuda_agent.train.trajectories import Episode, episode_from_record, read_episodes, select_for_rft, write_episodes

from .conftest import EXAMPLES, TASKS

SWISH = EXAMPLES / "swish"


def test_tasks_become_single_turn_prompts():
    tasks = data.load_tasks(TASKS)
    rows = data.prompt_rows(tasks)
    assert [r["task_name"] for r in rows] == [t.name for t in tasks]
    system, user = rows[0]["prompt"]
    assert system["role"] == "system" and user["role"] == "user"
    assert tasks[0].source.strip() in user["content"] and "### model_new.py" in user["content"]
    assert "{{" not in user["content"]


def test_prompt_template_fails_loudly():
    from cuda_agent.train.prompts import render

    with pytest.raises(KeyError):
        render("single_turn.md", task_name="x")
    with pytest.raises(KeyError):
        render("single_turn.md", task_name="x", task_source="y", typo=1)


def test_completion_round_trip_and_paths():
    files = read_files(SWISH / "solution")
    assert set(files) == {"model_new.py", "kernels/swish.cu", "kernels/swish_binding.cpp"}
    text = "Here is my solution.\n\n" + render_files(files) + "\n\n### ../../etc/passwd\n```\nx\n```"
    assert parse_completion(text) == {p: c if c.endswith("\n") else c + "\n" for p, c in files.items()}


def test_single_file_and_empty_completions(tmp_path):
    single = "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n```"
    files = parse_completion(single)
    assert list(files) == ["solution.py"]
    assert write_solution(files, tmp_path).kind == "file"
    assert parse_completion("I cannot do that.") == {}
    with pytest.raises(ValueError):
        write_solution({"model_new.py": "x", "../evil.py": "y"}, tmp_path / "w")


def _episode(reward, extra_calls=()):
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "content": {"type": "string"}} if n == "write_file" else {}, "required": []}}}
        for n in ("write_file", "compile", "submit")]
    call = lambda n, **a: {"role": "assistant", "content": "", "tool_calls": [  # noqa: E731
        {"type": "function", "function": {"name": n, "arguments": json.dumps(a)}}]}
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
            call("write_file", path="kernels/a.cu", content="__global__ void k() {}"),
            {"role": "tool", "content": "TOOL-OUTPUT-WRITE"}, *extra_calls,
            call("compile"), {"role": "tool", "content": "TOOL-OUTPUT-BUILD"},
            call("submit"), {"role": "tool", "content": "submitted"}]
    return Episode(task="swish", messages=msgs, tools=tools, reward=reward)


def test_rft_selection_keeps_positive_cleaned_episodes(tmp_path):
    bad_call = ({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "launch_rockets", "arguments": {}}}]},
        {"role": "tool", "content": "unknown tool"})
    path = tmp_path / "t.jsonl"
    write_episodes([_episode(2.0, bad_call), _episode(-1.0), _episode(1.0)], path)
    episodes = list(read_episodes(path))  # through the agent package's reader (format version checked)
    assert [e.reward for e in episodes] == [2.0, -1.0, 1.0]
    kept, stats = select_for_rft(episodes, min_reward=1.0)
    assert len(kept) == 2 and stats.unknown_calls == 1 and stats.submitted
    assert all(m["tool_calls"][0]["function"]["name"] != "launch_rockets" for m in kept[0].messages if "tool_calls" in m)
    rows = data.sft_rows(kept)
    assert set(rows[0]) == {"messages", "tools"}
    assert isinstance(rows[0]["messages"][2]["tool_calls"][0]["function"]["arguments"], dict)  # TRL wants dicts
    assert [r["value_target"] for r in data.value_rows(episodes)] == [2.0, -1.0, 1.0]


def test_agent_record_fields_are_read():
    rec = {"format_version": 1, "task": {"name": "L1_19", "path": None}, "messages": [{"role": "user", "content": "x"}],
           "tools": [], "reward": 3.0, "best": {"verdict": {"verdict": "correct", "reward": 3.0}}}
    ep = episode_from_record(rec)
    assert (ep.task, ep.reward, ep.verdict["verdict"]) == ("L1_19", 3.0, "correct")


def test_assistant_token_mask_covers_only_assistant_turns(tmp_path):
    pytest.importorskip("trl")
    from cuda_agent.train.tiny import make_tokenizer

    tok = make_tokenizer(["write_file compile submit TOOL-OUTPUT-WRITE TOOL-OUTPUT-BUILD"], 600)
    ep = _episode(1.0)
    ep.messages = [episode_from_record({"messages": ep.messages}).messages][0]
    ids, mask = data.assistant_token_mask(tok, ep.messages, ep.tools)
    assert len(ids) == len(mask) and 0 < sum(mask) < len(mask)
    actor = tok.decode([t for t, m in zip(ids, mask) if m])
    context = tok.decode([t for t, m in zip(ids, mask) if not m])
    assert "write_file" in actor and "submit" in actor and "TOOL-OUTPUT" not in actor
    assert "TOOL-OUTPUT-WRITE" in context and "task" in context


def test_task_names_from_files():
    assert load_task(SWISH / "task.py").source


def test_run_log_csv_png_and_resume(tmp_path):
    import csv

    from cuda_agent.train.metrics import RunLog

    log = RunLog(tmp_path, tensorboard=False)
    log.log(1, reward_mean=-1.0, pass_rate=0.0, loss=2.0)
    log.log(2, reward_mean=0.5, pass_rate=0.5, loss=1.0, explained_variance=0.3)  # a new column appears
    log.close()
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [r["step"] for r in rows] == ["1", "2"] and rows[0]["explained_variance"] == "" and rows[1]["loss"] == "1.0"
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "metrics.png").stat().st_size > 1000
    except ImportError:
        pass  # CSV and JSONL still work; the PNG needs matplotlib
    again = RunLog(tmp_path, tensorboard=False)  # a resumed run keeps the history
    again.log(3, reward_mean=1.0)
    assert again.series("reward_mean") == ([1, 2, 3], [-1.0, 0.5, 1.0])


def test_cli_data_conversion(tmp_path, capsys):
    from cuda_agent.cli import main

    assert main(["train", "data", "prompts", "--in", str(TASKS), "--out", str(tmp_path / "p.jsonl")]) == 0
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == len(list(TASKS.glob("*.py")))
    write_episodes([_episode(2.0), _episode(-1.0)], tmp_path / "t.jsonl")
    assert main(["train", "data", "sft", "--in", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "s.jsonl")]) == 0
    assert main(["train", "data", "value", "--in", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "v.jsonl")]) == 0
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 1
    assert len((tmp_path / "v.jsonl").read_text().splitlines()) == 2
    assert main(["train", "single-turn", "--preset", "smoke", "--set", "max_steps=7", "--print-config"]) == 0
    assert '"max_steps": 7' in capsys.readouterr().out
