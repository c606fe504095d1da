"""CPU smoke runs of the four stages with a tiny random-init model (a few steps each).

Only the LLM is a toy: rewards come from the real sandbox (completions of a random model are
format failures or static rejections, which need no GPU), trajectories from the real agent loop
replaying scripted honest turns (``verify`` reports no GPU here, so their reward is -1; the
value stage adds a copy relabelled +2 so that the critic has a variance to explain).
"""

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from cuda_agent.train.config import load_stage  # noqa: E402

from .conftest import EXAMPLES  # noqa: E402

SWISH_TASK = str(EXAMPLES / "swish" / "task.py")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from cuda_agent.train.demo import honest_pairs, record_episodes
    from cuda_agent.train.solution_io import read_files
    from cuda_agent.train.tiny import make_tiny_model
    from cuda_agent.train.trajectories import read_episodes, write_episodes

    root = tmp_path_factory.mktemp("train")
    pairs = honest_pairs()[:1]
    record_episodes(pairs, root / "agent.jsonl", root / "episodes")
    episodes = list(read_episodes(root / "agent.jsonl"))
    relabelled = [type(e)(**{**e.to_dict(), "reward": 2.0}) for e in episodes]
    write_episodes(episodes + relabelled, root / "mixed.jsonl")
    corpus = [json.dumps(m) for e in episodes for m in e.messages] + \
        [t for _, s in pairs for t in read_files(s).values()]
    make_tiny_model(root / "tiny", corpus)
    return root


def _rows(run_dir):
    with open(Path(run_dir) / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _cfg(stage, workdir, name, **kw):
    """The ``cpu`` preset of ``stage`` on the tiny model, writing to ``workdir/name``."""
    return load_stage(stage, "cpu", values=dict(model=str(workdir / "tiny"), output_dir=str(workdir / name),
                                                tensorboard=False, **kw))


def test_single_turn_grpo_with_sandbox_reward_and_resume(workdir, cache_dir):
    from cuda_agent.train.single_turn import SingleTurnStage

    cfg, args = _cfg("single-turn", workdir, "st", tasks=SWISH_TASK, max_completion_length=16)
    final = SingleTurnStage(cfg, args).run()
    assert (final / "config.json").is_file() and (workdir / "st" / "metrics.png").is_file()
    rows = _rows(workdir / "st")
    assert [r["step"] for r in rows] == ["1", "2"]
    assert float(rows[0]["sandbox_reward_mean"]) == -1.0 and float(rows[0]["pass_rate"]) == 0.0
    assert float(rows[0]["reward_frac_-1"]) == 1.0 and rows[0]["entropy"] and rows[0]["loss"]
    verdicts = [json.loads(l)["verdict"] for l in (workdir / "st" / "rollouts.jsonl").read_text().splitlines()]
    assert len(verdicts) == 4 and set(verdicts) == {"rejected"}  # random text: no solution (format error)
    # resume: the same run with one more step starts from checkpoint-2
    args.max_steps = 3
    SingleTurnStage(cfg, args).run()
    assert [r["step"] for r in _rows(workdir / "st")] == ["1", "2", "3"]


def test_rft_masks_tool_output_and_trains(workdir):
    from cuda_agent.train.metrics import RunLog
    from cuda_agent.train.rft import RFTStage

    cfg, args = _cfg("rft", workdir, "rft", trajectories=str(workdir / "agent.jsonl"), min_reward=-1.0,
                     max_length=6144, max_steps=2)
    assert args.assistant_only_loss and not args.packing  # the stage's own defaults under the preset
    stage = RFTStage(cfg, args)
    trainer = stage.build_trainer(RunLog(workdir / "rft_probe", tensorboard=False))
    ex = trainer.train_dataset[0]
    tok = trainer.processing_class
    target = tok.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label != -100])
    assert "write_file" in target and "submit" in target
    assert "<tool_response>" not in target and "build ok" not in target and "cannot verify" not in target
    # training sees exactly what inference renders: no arguments or schema keys unified across rows as null
    from cuda_agent.train.trajectories import read_episodes

    ep = next(iter(read_episodes(workdir / "agent.jsonl")))
    rendered = tok.apply_chat_template(ep.messages, tools=ep.tools, tokenize=False)
    assert tok.decode(ex["input_ids"]) == rendered and ": null" not in rendered
    final = stage.run()
    rows = _rows(workdir / "rft")
    assert len(rows) == 2 and float(rows[0]["loss"]) > 0 and (final / "tokenizer.json").is_file()
    assert json.loads((workdir / "rft" / "cleaning.json").read_text())["kept"] == 1


def test_value_pretraining_reports_explained_variance(workdir):
    from cuda_agent.train.value import ValueStage

    cfg, args = _cfg("value", workdir, "value", trajectories=str(workdir / "mixed.jsonl"), max_length=4096,
                     learning_rate=1e-3, max_steps=2, per_device_train_batch_size=2, save_steps=10)
    final = ValueStage(cfg, args).run()
    rows = _rows(workdir / "value")
    assert all(r["value_loss"] for r in rows[:2])
    ev = [float(r["final_explained_variance"]) for r in rows if r.get("final_explained_variance")]
    assert len(ev) == 1 and ev[0] == ev[0]  # finite (not NaN)
    from transformers import AutoConfig

    conf = AutoConfig.from_pretrained(final)
    assert conf.num_labels == 1 and conf.architectures[0].endswith("ForTokenClassification")  # what verl loads


def test_agentic_grpo_with_our_tools(workdir):
    from cuda_agent.train.agentic import AgenticStage

    cfg, args = _cfg("agentic", workdir, "agentic", tasks=SWISH_TASK, max_completion_length=24,
                     max_tool_calling_iterations=1, max_steps=2)
    AgenticStage(cfg, args).run()
    rows = _rows(workdir / "agentic")
    assert len(rows) == 2 and float(rows[0]["reward_mean"]) == -1.0 and "tools_call_frequency" in rows[0]
    rollouts = [json.loads(l) for l in (workdir / "agentic" / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 2 * args.num_generations and {r["task"] for r in rollouts} == {"task"}
    assert all(r["reward"] == -1.0 and isinstance(r["calls"], list) for r in rollouts)


def test_agentic_environment_runs_real_tools(workdir, cache_dir):
    """TRL's environment class: one method per training tool, each a call into the agent's Episode."""
    from cuda_agent.sandbox import SandboxConfig
    from cuda_agent.tasks import load_task
    from cuda_agent.train.agent_env import SessionConfig, call_log, start_episode
    from cuda_agent.train.trl_env import CudaAgentEnv
    from cuda_agent.train.evaluator import LocalEvaluator
    from cuda_agent.train.solution_io import read_files

    from .conftest import SOLUTIONS

    task = load_task(SWISH_TASK, name="swish")
    cfg = SessionConfig(run_root=str(workdir / "env"))
    env = CudaAgentEnv(lambda row: start_episode(task, cfg, LocalEvaluator(SandboxConfig(cache_dir=cache_dir))))
    env.reset(prompt=[], task_name="swish")
    cheat = read_files(SOLUTIONS / "cheat_torch_fallback")["model_new.py"]
    assert "model_new.py" in env.write_file(path="model_new.py", content=cheat)
    out = env.verify()
    assert '"verdict": "rejected"' in out and "torch_compute" in out, out
    for _ in range(3):
        env.verify()  # the engine's rule: the 4th identical call on an unchanged workspace is refused
    assert env.episode.messages[-1]["content"].startswith("refused: you made this exact call 3 times")
    env.submit(summary="x")
    assert "episode is over" in env.read_file(path="model.py")
    assert env.get_reward() == -1.0
    log = call_log(env.episode)
    assert [c["tool"] for c in log] == ["write_file", "verify", "verify", "verify", "verify", "submit"]
    assert log[1]["reply"] == out[:300]


def test_trl_renders_our_tools_exactly_as_the_agent_presents_them():
    """TRL lists an environment's tool methods by name and renders each through transformers'
    get_json_schema; the agent presents its schemas in TRAINING_TOOLS order. Both must give the
    same JSON, or a policy trained on recorded trajectories (RFT) meets another prompt in the
    agentic stage (a memorizing tiny model then makes no tool call at all)."""
    import inspect

    from transformers.utils import get_json_schema

    from cuda_agent.train.agent_env import SessionConfig, tool_schemas
    from cuda_agent.train.trl_env import CudaAgentEnv

    methods = [getattr(CudaAgentEnv(), n) for n, _ in inspect.getmembers(CudaAgentEnv, predicate=inspect.isfunction)
               if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert [get_json_schema(m) for m in methods] == tool_schemas(SessionConfig())


def test_recorded_compile_reads_the_build_cache(workdir):
    """The honest solution is built before it is replayed, so the recorded ``compile`` reply is the
    cached one that a policy rewriting the same files meets later (not a fresh build's)."""
    from cuda_agent.train.trajectories import read_episodes

    (episode,) = read_episodes(workdir / "agent.jsonl")
    replies = [m["content"] for m in episode.messages if m.get("role") == "tool" and "build ok" in m["content"]]
    assert replies and all("build ok (cached, " in r for r in replies), replies
