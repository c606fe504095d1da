"""Our verl configs under real Hydra, against the installed verl's packaged config, as ``main_ppo``
composes them (``.ci/run`` installs verl with ``--no-deps``: its YAML files, not its dependencies),
and resolved as a Ray worker sees them."""

import importlib.util
import re

import pytest

if importlib.util.find_spec("verl") is None or importlib.util.find_spec("hydra") is None:
    pytest.skip("needs verl's packaged config and Hydra: pip install --no-deps verl==0.9.1 && pip install "
                "hydra-core omegaconf (.ci/run does)", allow_module_level=True)

from omegaconf import OmegaConf  # noqa: E402

from cuda_agent.cli import main  # noqa: E402
from cuda_agent.train.cluster import agent_loop  # noqa: E402
from cuda_agent.train.cluster.launch import (env_overrides, forwarded_env, hydra_quote,  # noqa: E402
                                             main_ppo_argv, printable)
from cuda_agent.train.cluster.schema import (ENV_VARS, compose_config, leaves, resolved, validate,  # noqa: E402
                                             verl_version, worker_env)

from .conftest import ROOT  # noqa: E402

CONFIGS = ROOT / "configs" / "verl"
HYDRA_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if p.name != "agent_loops.yaml")
"""Every Hydra config we ship (agent_loops.yaml is a list that verl's agent-loop worker loads itself)."""
PAPER = CONFIGS / "ppo_agentic.yaml"
SMOKE = CONFIGS / "ppo_agentic_smoke.yaml"
CLUSTER_ENV = {"CUDA_AGENT_EVAL_URL": "http://10.0.0.9:8420", "CUDA_AGENT_EVAL_TOKEN": "s3cr3t-token",
               "CUDA_AGENT_TRAIN_DATA": "/shared/data/train.parquet", "NNODES": "4", "GPUS_PER_NODE": "8"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """The repo root as working directory (verl reads a relative agent-loop path from there) and
    none of the variables the configs read, whatever the developer's shell holds."""
    import os

    monkeypatch.chdir(ROOT)
    for name in list(os.environ):
        if name.startswith("CUDA_AGENT_") or name in ("NNODES", "GPUS_PER_NODE"):
            monkeypatch.delenv(name)


def test_the_hydra_configs_are_the_ones_we_ship():
    assert [p.name for p in HYDRA_CONFIGS] == ["ppo_agentic.yaml", "ppo_agentic_smoke.yaml"]


@pytest.mark.parametrize("path", HYDRA_CONFIGS, ids=lambda p: p.stem)
def test_every_config_composes_under_hydra_and_passes_the_check(path):
    cfg = compose_config(path)
    assert cfg.algorithm.adv_estimator == "gae" and "ppo_mini_batch_size" in cfg.critic  # verl's keys are there
    assert validate(path, paper=path == PAPER) == []


@pytest.mark.parametrize("path", HYDRA_CONFIGS, ids=lambda p: p.stem)
def test_node_counts_come_out_as_numbers(path, monkeypatch):
    for k, v in CLUSTER_ENV.items():
        monkeypatch.setenv(k, v)
    cfg = compose_config(path, env_overrides(forwarded_env(path, (), CLUSTER_ENV)))
    assert type(cfg.trainer.nnodes) is int and cfg.trainer.nnodes == 4
    assert type(cfg.trainer.n_gpus_per_node) is int and cfg.trainer.n_gpus_per_node == 8
    assert cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node == 32  # what verl's validate_config computes


def test_the_smoke_config_is_the_paper_recipe_made_small():
    paper, smoke = resolved(compose_config(PAPER)), resolved(compose_config(SMOKE))
    assert paper["algorithm.adv_estimator"] == "gae" and (paper["algorithm.gamma"], paper["algorithm.lam"]) == (1.0, 0.95)
    assert (paper["actor_rollout_ref.actor.clip_ratio_low"], paper["actor_rollout_ref.actor.clip_ratio_high"]) == (0.2, 0.28)
    assert paper["data.train_batch_size"] * paper["actor_rollout_ref.rollout.n"] == 1024
    assert paper["actor_rollout_ref.rollout.agent.default_agent_loop"] == agent_loop.AGENT_NAME
    assert smoke["critic.optim.lr"] == 6e-6 and smoke["trainer.total_training_steps"] == 3
    assert any("total_training_steps" in e for e in validate(SMOKE, paper=True))


def test_typos_wrong_types_and_wrong_numbers_are_caught():
    errors = "\n".join(validate(PAPER, ["+algorithm.lamda=0.95", "actor_rollout_ref.actor.clip_ratio_high=0.2",
                                        "critic.model.path=''", "actor_rollout_ref.rollout.response_length=1000",
                                        "trainer.nnodes='2'", "algorithm.gamma=one"]))
    for needle in (f"algorithm.lamda: not a key of verl {verl_version()}'s ppo_trainer config",
                   "clip_ratio_high: 0.2, the paper's recipe has 0.28", "critic.model.path is empty",
                   "response_length (1000) differs", "trainer.nnodes: '2' (str), where verl's default is 1 (int)",
                   "algorithm.gamma: 'one' (str), where verl's default is 1.0 (float)"):
        assert needle in errors, errors
    assert validate(PAPER, ["++data.apply_chat_template_kwargs.enable_thinking=false"]) == []  # an open node of verl's


def test_a_config_hydra_cannot_compose_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hydra:\n  searchpath: [pkg://verl.trainer.config]\ndefaults:\n  - no_such_base\n  - _self_\n")
    [error] = validate(bad)
    assert error.startswith("Hydra cannot compose it") and "no_such_base" in error


def test_a_value_resolved_only_on_the_driver_fails_the_check(monkeypatch, capsys):
    """The old launcher exported NNODES and the service URL in the submitting shell only: the
    driver saw them, verl's TaskRunner and AgentLoopWorker actors did not."""
    for k, v in CLUSTER_ENV.items():
        monkeypatch.setenv(k, v)
    errors = "\n".join(validate(PAPER))
    assert "trainer.nnodes: 4 here but 1 in a Ray worker" in errors and "$NNODES is set in this shell" in errors
    assert "data.train_files: '/shared/data/train.parquet' here but 'data/verl/agentic_train.parquet'" in errors
    assert "eval_url: 'http://10.0.0.9:8420' here but 'http://127.0.0.1:8420' in a Ray worker" in errors
    assert main(["train", "verl-check", str(PAPER)]) == 1
    assert "in a Ray worker" in capsys.readouterr().out
    forwarded = forwarded_env(PAPER, (), CLUSTER_ENV)
    assert forwarded == CLUSTER_ENV  # read by the config (NNODES, ...), or ours by name (the token)
    assert validate(PAPER, env_overrides(forwarded)) == []


def test_verl_launch_refuses_to_forward_a_secret_verl_would_print(monkeypatch, capsys):
    for k, v in CLUSTER_ENV.items():
        monkeypatch.setenv(k, v)
    assert main(["train", "verl-launch", "--no-paper", "--dry-run", str(SMOKE)]) == 1
    out = capsys.readouterr().out
    assert "s3cr3t-token" not in out and "$CUDA_AGENT_EVAL_TOKEN would be printed in verl's log" in out
    assert "set CUDA_AGENT_EVAL_TOKEN_FILE to its path" in out and len(out.strip().splitlines()) == 1


def test_only_names_that_hold_a_secret_itself_are_refused():
    from cuda_agent.train.cluster.launch import secret_values

    names = ["CUDA_AGENT_EVAL_TOKEN", "WANDB_API_KEY", "DB_PASSWORD", "CUDA_AGENT_EVAL_TOKEN_FILE",
             "CUDA_AGENT_TOKENIZER", "KEYBOARD_LAYOUT", "CUDA_AGENT_KEY_DIR", "NNODES"]
    assert secret_values(dict.fromkeys(names, "x")) == ["CUDA_AGENT_EVAL_TOKEN", "WANDB_API_KEY", "DB_PASSWORD"]


def test_verl_launch_checks_then_forwards_the_token_files_path(monkeypatch, capsys):
    for k, v in CLUSTER_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CUDA_AGENT_EVAL_TOKEN")
    monkeypatch.setenv("CUDA_AGENT_EVAL_TOKEN_FILE", "/shared/eval_token")
    assert main(["train", "verl-launch", "--no-paper", "--dry-run", str(SMOKE), "trainer.total_training_steps=2"]) == 0
    out = capsys.readouterr().out
    assert "ok (verl" in out and "env_vars.CUDA_AGENT_EVAL_TOKEN_FILE=***" in out  # masked all the same
    assert ("forwarded to Ray workers: CUDA_AGENT_EVAL_TOKEN_FILE, CUDA_AGENT_EVAL_URL, CUDA_AGENT_TRAIN_DATA"
            in out)
    argv = main_ppo_argv(SMOKE, ["trainer.total_training_steps=2"], forwarded_env(SMOKE, (), CLUSTER_ENV))
    assert argv[1:8] == ["-m", "verl.trainer.main_ppo", "--config-path", str(CONFIGS), "--config-name",
                         "ppo_agentic_smoke", "hydra.searchpath=[pkg://verl.trainer.config]"]
    assert f"++{ENV_VARS}.NNODES='4'" in argv and "s3cr3t-token" not in printable(argv)
    # what main_ppo composes from this argv (our primary config, verl's by the searchpath) is what was checked
    cfg = compose_config(SMOKE, argv[8:])
    assert worker_env(cfg) == CLUSTER_ENV and cfg.trainer.total_training_steps == 2


def test_env_vars_must_be_strings_without_interpolations():
    interpolated = f"++{ENV_VARS}.CUDA_AGENT_EVAL_URL='${{oc.env:CUDA_AGENT_EVAL_URL}}'"
    errors = "\n".join(validate(PAPER, [f"++{ENV_VARS}.NNODES=4", interpolated]))
    assert f"{ENV_VARS}.NNODES: 4 (int); Ray takes strings only" in errors
    assert "verl passes env_vars to ray.init unresolved" in errors


@pytest.mark.parametrize("value", ["http://10.0.0.9:8420", "a b,c=d", "it's", "back\\slash", "ends\\", "\\'", "x\\\\",
                                   "[]{}:$", '"', ""])
def test_forwarded_values_arrive_as_the_same_string(value):
    cfg = compose_config(PAPER, env_overrides({"CUDA_AGENT_X": value}))
    assert worker_env(cfg) == {"CUDA_AGENT_X": value}
    assert OmegaConf.select(cfg, f"{ENV_VARS}.CUDA_AGENT_X") == value


def test_a_value_hydra_would_interpolate_is_refused_without_showing_it(monkeypatch, capsys):
    with pytest.raises(ValueError, match="interpolation"):
        hydra_quote("${oc.env:HOME}")
    monkeypatch.setenv("CUDA_AGENT_EVAL_TOKEN", "ab${cd}")
    assert main(["train", "verl-launch", "--dry-run", str(PAPER)]) == 1
    out = capsys.readouterr().out
    assert "$CUDA_AGENT_EVAL_TOKEN cannot be forwarded to Ray workers" in out and "ab${cd}" not in out


def test_missing_config_and_bad_config_are_errors_naming_the_file(tmp_path, capsys):
    assert main(["train", "verl-check", str(tmp_path / "nope.yaml")]) == 1
    assert f"{tmp_path / 'nope.yaml'}: no such config" in capsys.readouterr().out
    (tmp_path / "bad.yaml").write_text("defaults:\n  - no_such_base\n")
    assert main(["train", "verl-launch", "--dry-run", str(tmp_path / "bad.yaml")]) == 1
    assert "Hydra cannot compose it" in capsys.readouterr().out


def test_check_files_wants_existing_absolute_paths(monkeypatch, tmp_path):
    (tmp_path / "actor").mkdir()
    monkeypatch.chdir(tmp_path)
    errors = "\n".join(validate(PAPER, ["actor_rollout_ref.model.path=actor", "critic.model.path=/nonexistent/critic",
                                        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={CONFIGS}/agent_loops.yaml"],
                                check_files=True))
    assert "actor_rollout_ref.model.path: actor is relative; a Ray worker reads it from its own directory" in errors
    assert "critic.model.path: /nonexistent/critic does not exist" in errors


def test_leaves_are_scalars_lists_and_empty_dicts():
    cfg = compose_config(PAPER)
    keys = set(leaves(cfg))
    assert {"trainer.nnodes", "algorithm.gamma", f"{ENV_VARS}"} <= keys  # env_vars: {} is a leaf


def test_the_verl_extra_pins_the_checked_verl():
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["verl"]
    [req] = [Requirement(r) for r in extra if re.match(r"verl\b", r)]
    assert req.specifier and verl_version() in req.specifier, (str(req), verl_version())


def test_the_launcher_submits_with_every_variable_forwarded_and_absolute_paths(tmp_path):
    """``scripts/launch_verl_ray.sh`` as ``ROLE=submit`` (``DRY_RUN=1``: the command, checked, not run),
    against a local stand-in for the evaluation service's health endpoint."""
    import os
    import shlex
    import shutil
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if not (shutil.which("curl") and shutil.which("realpath")):
        pytest.skip("the launcher needs curl and realpath")

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    bin_dir, data = tmp_path / "bin", tmp_path / "data"
    for d in (bin_dir, data, tmp_path / "actor", tmp_path / "critic"):
        d.mkdir()
    (data / "agentic_train.parquet").touch()
    (data / "agentic_val.parquet").touch()
    shim = bin_dir / "cuda-agent"  # this checkout's CLI, whatever is installed
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m cuda_agent.cli \"$@\"\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_AGENT_") and k not in ("NNODES", "GPUS_PER_NODE")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", PYTHONPATH=f"{ROOT / 'src'}:{env.get('PYTHONPATH', '')}",
               ROLE="submit", HEAD_IP="127.0.0.1", EVAL_URL=f"http://127.0.0.1:{server.server_port}", NNODES="3",
               GPUS_PER_NODE="8", DATA_DIR=str(data), ACTOR=str(tmp_path / "actor"), CRITIC=str(tmp_path / "critic"),
               EVAL_TOKEN_FILE=str(tmp_path / "eval_token"), CONFIG="ppo_agentic_smoke", DRY_RUN="1")
    (tmp_path / "eval_token").write_text("launcher-t0ken-0123456789\n")
    try:
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "launch_verl_ray.sh"), "trainer.total_training_steps=1"],
                              env=env, capture_output=True, text=True, timeout=300, check=False)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "ppo_agentic_smoke.yaml: ok" in out and "launcher-t0ken-0123456789" not in out
    names = out.split("forwarded to Ray workers: ")[1].splitlines()[0].split(", ")
    assert names == ["CUDA_AGENT_ACTOR", "CUDA_AGENT_CRITIC", "CUDA_AGENT_EVAL_TOKEN_FILE", "CUDA_AGENT_EVAL_URL",
                     "CUDA_AGENT_LOOPS", "CUDA_AGENT_RUNS", "CUDA_AGENT_TRAIN_DATA", "CUDA_AGENT_VAL_DATA",
                     "GPUS_PER_NODE", "NNODES"]
    argv = shlex.split(out.strip().splitlines()[-1])
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"] and "trainer.total_training_steps=1" in argv
    assert f"++{ENV_VARS}.NNODES='3'" in argv and f"++{ENV_VARS}.CUDA_AGENT_RUNS='{ROOT}/runs/verl'" in argv
    assert f"++{ENV_VARS}.CUDA_AGENT_ACTOR='{os.path.realpath(tmp_path / 'actor')}'" in argv and f"++{ENV_VARS}.CUDA_AGENT_EVAL_TOKEN_FILE=***" in argv
