"""Stage settings through TRL's own parser, the shipped YAML and accelerate configs, the packaged
demo data. No training here (tests/test_train_stages.py and tests/test_train_recipe.py train)."""

import filecmp
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("trl")

from cuda_agent.cli import main  # noqa: E402
from cuda_agent.train.config import ConfigError, load_stage  # noqa: E402

from .conftest import EXAMPLES, ROOT, SOLUTIONS, TASKS  # noqa: E402

STAGE_FILES = {"single-turn": "single_turn", "rft": "rft", "value": "value", "agentic": "agentic"}


def test_any_trainer_field_can_be_set_and_is_typed():
    cfg, args = load_stage("single-turn", "paper", overrides=[
        "learning_rate=1e-5", "max_steps=7", "report_to=tensorboard", "use_vllm=true", "vllm_mode=server",
        "disable_tqdm=false", "reward_kind=speedup", "max_tasks=3"])
    assert type(args).__name__ == "GRPOConfig"
    assert args.learning_rate == 1e-5 and isinstance(args.max_steps, int) and args.max_steps == 7
    assert args.report_to == ["tensorboard"] and args.use_vllm is True and args.vllm_mode == "server"
    assert args.disable_tqdm is False
    assert cfg.reward_kind == "speedup" and cfg.max_tasks == 3
    # the paper's numbers are the stage's defaults; the house defaults stay overridable
    assert (args.epsilon, args.epsilon_high, args.beta, args.loss_type) == (0.2, 0.28, 0.0, "dapo")
    _, plain = load_stage("single-turn", "paper")
    assert plain.report_to == [] and plain.disable_tqdm is True and plain.max_steps == 150


def test_list_field_takes_several_values():
    cfg, _ = load_stage("agentic", "paper", overrides=["tools=write_file compile verify submit"])
    assert cfg.tools == ["write_file", "compile", "verify", "submit"]
    assert cfg.session().tools == ("write_file", "compile", "verify", "submit")


def test_layers_later_ones_win(tmp_path):
    """Stage defaults < preset < values < YAML < --set."""
    yaml_file = tmp_path / "rft.yaml"
    yaml_file.write_text("learning_rate: 2.0e-4\nmax_steps: 11\nreport_to: [tensorboard]\nenv:\n  CUDA_AGENT_I18: x\n")
    _, args = load_stage("rft", "smoke")
    assert (args.learning_rate, args.max_steps, args.max_length) == (2e-3, 400, 16384)  # smoke over the defaults
    assert args.assistant_only_loss and not args.packing  # the stage's own defaults
    _, args = load_stage("rft", "smoke", yaml_file, values={"max_steps": 5, "save_steps": 3, "learning_rate": 1.0},
                         overrides=["max_steps=9"])
    assert (args.learning_rate, args.max_steps, args.save_steps) == (2e-4, 9, 3)
    assert args.report_to == ["tensorboard"]
    import os

    assert os.environ.pop("CUDA_AGENT_I18") == "x"  # TRL's env: block


@pytest.mark.parametrize("argv, words", [
    (["train", "rft", "--set", "learing_rate=1e-5"], ["unknown key 'learing_rate'", "learning_rate"]),
    (["train", "single-turn", "--set", "max_steps=ten"], ["--max_steps", "invalid int value: 'ten'"]),
    (["train", "value", "--set", "learning_rate"], ["expected key=value"]),
    (["train", "recipe", "--set", "rtf.max_steps=1"], ["'rtf' is not one of"]),
    (["train", "recipe", "--set", "agentic.temprature=0.5"], ["unknown key 'temprature'", "stage agentic"]),
    (["train", "recipe", "--set", "recipe.demo_taks=2"], ["unknown key 'demo_taks'", "recipe"]),
])
def test_bad_settings_are_one_line_errors(argv, words, capsys):
    assert main([*argv, "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("cuda-agent train: ") and all(w in err for w in words), err


def test_unknown_yaml_key_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rate: 1.0e-5\nnum_genrations: 4\n")
    assert main(["train", "agentic", "--config", str(bad), "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"cuda-agent train: {bad}: unknown key 'num_genrations' for stage agentic (did you mean "
                          "num_generations"), err
    with pytest.raises(ConfigError, match="expected a YAML mapping"):
        (tmp_path / "list.yaml").write_text("- a\n")
        load_stage("rft", config_file=tmp_path / "list.yaml")


def test_shipped_stage_yamls_load(capsys):
    """configs/trl/stages/<stage>.yaml: the 8-GPU settings for the 8B defaults, through the parser."""
    files = sorted((ROOT / "configs" / "trl" / "stages").glob("*.yaml"))
    assert sorted(f.stem for f in files) == sorted(STAGE_FILES.values())
    for stage, stem in STAGE_FILES.items():
        cfg, args = load_stage(stage, "paper", ROOT / "configs" / "trl" / "stages" / f"{stem}.yaml")
        assert args.bf16 and args.report_to == ["tensorboard"], stage
        assert args.gradient_checkpointing is False, stage  # FSDP's own activation checkpointing instead
        assert cfg.model == "Qwen/Qwen3-8B"
        if stage in ("single-turn", "agentic"):
            assert args.use_vllm and args.vllm_mode == "colocate"


def test_accelerate_config_passes_accelerates_own_checks():
    """The 8-GPU FSDP2 config through accelerate's loader, ``accelerate launch``'s checks and the
    environment it hands each process, read back by accelerate's FSDP plugin."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin, patch_environment
    from accelerate.utils.launch import prepare_multi_gpu_env

    from cuda_agent.train.recipe import launch_command

    config = ROOT / "configs" / "trl" / "accelerate" / "fsdp2_8gpu.yaml"
    cmd = launch_command(f"accelerate launch --config_file {config}", "rft", "paper", Path("runs/x/rft/stage.yaml"))
    assert cmd[:2] == ["accelerate", "launch"]
    args = launch_command_parser().parse_args(cmd[2:])
    args, _, _ = _validate_launch_command(args)
    assert args.use_fsdp and args.num_processes == 8 and args.mixed_precision == "bf16"
    assert args.module and args.training_script == "cuda_agent.cli"
    assert args.training_script_args == ["train", "rft", "--preset", "paper", "--config", "runs/x/rft/stage.yaml"]
    env = prepare_multi_gpu_env(args)
    with patch_environment(**env):
        plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True and plugin.activation_checkpointing
    assert plugin.state_dict_type.name == "FULL_STATE_DICT"  # final/ loads by path in the next stage
    assert plugin.transformer_cls_names_to_wrap == ["Qwen3DecoderLayer"]
    # the class named there is the block of the default actor's architecture
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tiny = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, head_dim=8))
    assert "Qwen3DecoderLayer" in {type(m).__name__ for m in tiny.modules()}


def test_packaged_demo_data_matches_the_repository():
    """The demo's pairs ship in the package (the smoke preset needs them without a checkout); they
    are copies of examples/ and tests/ and must stay the same files."""
    from cuda_agent.train.demo import DEMO_DATA, DEMO_TASKS, honest_pairs

    origin = {"swish": (EXAMPLES / "swish" / "task.py", EXAMPLES / "swish" / "solution")}
    origin.update({n: (TASKS / f"{n}.py", SOLUTIONS / f"honest_{n}") for n in DEMO_TASKS if n != "swish"})
    for name in DEMO_TASKS:
        task, solution = origin[name]
        assert filecmp.cmp(task, DEMO_DATA / name / "task.py", shallow=False), name
        cmp = filecmp.dircmp(solution, DEMO_DATA / name / "solution", ignore=["__pycache__"])
        stack = [cmp]
        while stack:
            c = stack.pop()
            assert not (c.left_only or c.right_only or c.diff_files), (name, c.left_only, c.right_only, c.diff_files)
            stack += c.subdirs.values()
    assert [t.name for t, _ in honest_pairs()] == DEMO_TASKS
    with pytest.raises(FileNotFoundError, match="no <name>/task.py"):
        honest_pairs(ROOT / "docs")


def test_wheel_ships_the_demo_data_and_the_recipe(tmp_path):
    """What ``pip install`` (not editable) installs: built from a copy of the sources, as pip does."""
    import shutil

    src = tmp_path / "src_copy"
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("cuda_agent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    from cuda_agent.train.demo import DEMO_DATA

    for f in DEMO_DATA.rglob("*"):
        if f.is_file() and "__pycache__" not in f.parts:
            assert f"cuda_agent/train/demo_data/{f.relative_to(DEMO_DATA).as_posix()}" in names, f
    assert {"cuda_agent/train/recipe.py", "cuda_agent/train/config.py", "cuda_agent/train/presets.py"} <= names


def test_launched_stage_resolves_the_same_settings(tmp_path):
    """``train recipe --launcher``: the command each stage is launched with, parsed by our CLI, gives
    the settings the recipe resolved in its own process (wiring, the stage's YAML, --set)."""
    import argparse

    from cuda_agent.cli import build_parser
    from cuda_agent.train.config import merged_yaml, resolved
    from cuda_agent.train.recipe import Recipe, launch_command, load_recipe

    user = tmp_path / "rft.yaml"
    user.write_text("learning_rate: 3.0e-4\nreport_to: [tensorboard]\n")
    cfg = load_recipe("smoke", {"out": str(tmp_path / "run"), "tasks": "t.parquet", "trajectories": "traj/"})
    recipe = Recipe(cfg, "smoke", {"rft": str(user)}, {"rft": ["max_steps=7"], "agentic": ["temperature=0.5"]})
    for stage in ("single-turn", "rft", "value", "agentic"):
        stage_file = tmp_path / f"{stage}.yaml"
        stage_file.write_text(merged_yaml(recipe.stage_values(stage), recipe.stage_configs.get(stage)))
        cmd = launch_command("accelerate launch --num_processes 8", stage, "smoke", stage_file,
                             recipe.overrides.get(stage, []))
        i = cmd.index("cuda_agent.cli")
        args: argparse.Namespace = build_parser().parse_args(cmd[i + 1:])
        child = load_stage(args.stage, args.preset, args.config, None, args.overrides)
        assert resolved(*child) == resolved(*recipe.stage_config(stage)), stage
    config, trainer = recipe.stage_config("rft")
    assert (trainer.learning_rate, trainer.max_steps, trainer.report_to) == (3e-4, 7, ["tensorboard"])
    assert config.model == str(tmp_path / "run" / "single_turn" / "final") and config.trajectories == "traj/"


def test_recipe_with_trajectories_needs_tasks_and_model(tmp_path, capsys):
    argv = ["train", "recipe", "--preset", "cpu", "--out", str(tmp_path / "r"), "--trajectories", "t.jsonl"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cuda-agent train: recipe: with --trajectories, give --tasks and --model too"), err
    assert not (tmp_path / "r").exists()  # refused before anything was written
