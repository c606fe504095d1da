"""verl's settings reach the Ray workers of a real two-node cluster.

Two Ray nodes on this host, each started by ``ray start`` in an environment of its own (neither
has any ``CUDA_AGENT_*`` variable, ``NNODES`` or ``GPUS_PER_NODE``; only the worker node has the
marker ``PROBE_NODE=worker``) and in a directory of its own; the head has no CPU, so every actor lands on the worker node. The
driver (this process) sets the variables, as the submitting shell does. The job is started by
the installed verl's own ``run_ppo`` (its source, executed here: importing ``main_ppo`` needs
verl's full dependencies) with a probe in place of its ``TaskRunner``. The probe does what
verl's actors do with the config: ``OmegaConf.resolve`` (``TaskRunner.run``), then ``OmegaConf.load``
of the agent-loop file, resolved (``AgentLoopWorker``).

* Old way (the variables exported in the driver only): the actor sees none of them, the config
  resolves to its defaults there, and the default relative agent-loop path is not found.
* New way (``cuda-agent train verl-launch``'s ``runtime_env.env_vars``): the actor sees every one.

Loopback addresses only, a temporary directory, bounded waits; the nodes are stopped by their
process groups (the processes this test started), even on failure.
"""

import ast
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install ray; .ci/run does)")
if importlib.util.find_spec("verl") is None:
    pytest.skip("needs verl's main_ppo source and configs: pip install --no-deps verl==0.9.1 (.ci/run does)",
                allow_module_level=True)
pytest.importorskip("hydra", reason="needs hydra-core")

from omegaconf import OmegaConf  # noqa: E402

from cuda_agent.train.cluster.launch import env_overrides, forwarded_env  # noqa: E402
from cuda_agent.train.cluster.schema import compose_config, verl_config_dir  # noqa: E402

from .conftest import ROOT  # noqa: E402

CONFIG = ROOT / "configs" / "verl" / "ppo_agentic.yaml"
START_TIMEOUT_S = 180  # generous: two nodes on two loaded cores
RAY = [sys.executable, "-m", "ray.scripts.scripts"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"the Ray head did not open port {port} in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM, then SIGKILL, to the process group of each ``ray start --block`` we started."""
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
        for p in procs:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait_s
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        if all(p.poll() is not None for p in procs):
            try:  # the raylets and workers share each group; make sure none is left
                for p in procs:
                    os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return


@pytest.fixture(scope="module")
def cluster():
    """``127.0.0.1:PORT`` of a head (no CPU) and a worker node (1 CPU), started in different environments."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    port, client_port = _free_port(), _free_port()
    bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", str(temp)),
            "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address", "127.0.0.1", "--object-store-memory", str(100 * 2**20), "--block",
              "--disable-usage-stats"]
    procs: list[subprocess.Popen] = []
    try:
        head_log = temp / "head.log"
        procs.append(subprocess.Popen(
            [*RAY, "start", "--head", "--port", str(port), "--ray-client-server-port", str(client_port),
             "--num-cpus", "0", "--include-dashboard=false", "--temp-dir", str(temp), *common],
            env=bare, cwd=temp, stdout=head_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for_port(port, procs[0], head_log)
        worker_log = temp / "worker.log"
        procs.append(subprocess.Popen(
            [*RAY, "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1", *common],
            env={**bare, "PROBE_NODE": "worker"}, cwd=temp, stdout=worker_log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True))
        address = f"127.0.0.1:{port}"
        ray.init(address=address)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while sum(n["Alive"] for n in ray.nodes()) < 2:
                if time.monotonic() > deadline or procs[1].poll() is not None:
                    raise RuntimeError(f"the worker node did not join:\n{worker_log.read_text()[-3000:]}")
                time.sleep(0.5)
        finally:
            ray.shutdown()
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _stop(procs)
        shutil.rmtree(temp, ignore_errors=True)


def verl_run_ppo():
    """``run_ppo`` from the installed verl's ``main_ppo.py``: the code that turns the config into
    ``ray.init(...)`` and starts the ``TaskRunner``. Its module needs verl's full dependencies, so
    the function is compiled from the source with the names it uses; ``get_ppo_ray_runtime_env``
    (verl's NCCL/vLLM defaults, which need torch's device probe) gives those defaults' shape."""
    src = verl_config_dir().parent / "main_ppo.py"
    tree = ast.parse(src.read_text())
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_ppo"), None)
    if fn is None:
        pytest.skip(f"{src} has no run_ppo: see how this verl starts Ray before trusting the launcher")
    namespace = {"os": os, "ray": ray, "OmegaConf": OmegaConf, "is_cuda_available": False,
                 "get_ppo_ray_runtime_env": lambda config=None: {"env_vars": {"TOKENIZERS_PARALLELISM": "true"},
                                                                 "working_dir": None}}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(src), "exec"), namespace)
    return namespace["run_ppo"]


def probe_class(out: Path):
    """A ``TaskRunner`` stand-in (built here so that Ray ships it by value) that writes what it sees to ``out``."""

    @ray.remote
    class Probe:
        def run(self, config):
            import json
            import os

            from omegaconf import OmegaConf

            OmegaConf.resolve(config)  # TaskRunner.run
            loops_path = config.actor_rollout_ref.rollout.agent.agent_loop_config_path
            loops = OmegaConf.load(loops_path) if os.path.isfile(loops_path) else None  # AgentLoopWorker
            seen = {
                "node": os.environ.get("PROBE_NODE"),
                "env": {k: v for k, v in os.environ.items() if k.startswith("CUDA_AGENT_")
                        or k in ("NNODES", "GPUS_PER_NODE")},
                "nnodes": config.trainer.nnodes, "n_gpus_per_node": config.trainer.n_gpus_per_node,
                "train_files": config.data.train_files, "actor": config.actor_rollout_ref.model.path,
                "critic": config.critic.model.path, "runs": config.trainer.default_local_dir,
                "cwd": os.getcwd(),
                "eval_url": OmegaConf.to_container(loops, resolve=True)[0]["eval_url"] if loops else None,
            }
            with open(out, "w") as f:
                json.dump(seen, f)

    return Probe


@pytest.fixture
def driver_env(cluster, monkeypatch, tmp_path):
    """The submitting shell: what the launcher exports, and RAY_ADDRESS."""
    env = {"CUDA_AGENT_EVAL_URL": "http://127.0.0.1:18420", "CUDA_AGENT_EVAL_TOKEN": "t0ken-for-the-test",
           "CUDA_AGENT_TRAIN_DATA": str(tmp_path / "train.parquet"), "CUDA_AGENT_VAL_DATA": str(tmp_path / "val.parquet"),
           "CUDA_AGENT_ACTOR": str(tmp_path / "actor"), "CUDA_AGENT_CRITIC": str(tmp_path / "critic"),
           "CUDA_AGENT_LOOPS": str(ROOT / "configs" / "verl" / "agent_loops.yaml"),
           "CUDA_AGENT_RUNS": str(tmp_path / "runs"), "NNODES": "2", "GPUS_PER_NODE": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RAY_ADDRESS", cluster)
    return env


def run_job(overrides: list[str], out: Path) -> dict:
    cfg = compose_config(CONFIG, overrides)
    try:
        verl_run_ppo()(cfg, probe_class(out))
    finally:
        ray.shutdown()
    return json.loads(out.read_text())


def test_variables_exported_only_in_the_driver_do_not_reach_the_actor(driver_env, tmp_path):
    seen = run_job([], tmp_path / "seen.json")
    assert seen["node"] == "worker"  # it ran on the node started without the variables
    assert seen["env"] == {}
    assert (seen["nnodes"], seen["n_gpus_per_node"]) == (1, 8)  # the defaults, not the driver's 2 and 1
    assert seen["train_files"] == "data/verl/agentic_train.parquet"
    assert seen["eval_url"] is None  # the default, relative agent-loop path is not there: the node runs elsewhere
    assert seen["cwd"] != str(ROOT)


def test_forwarded_variables_reach_the_actor_through_verls_runtime_env(driver_env, tmp_path):
    forwarded = forwarded_env(CONFIG, (), os.environ)
    assert set(forwarded) == set(driver_env)  # every CUDA_AGENT_* value and the node counts
    seen = run_job(env_overrides(forwarded), tmp_path / "seen.json")
    assert seen["node"] == "worker"
    assert seen["env"] == driver_env
    assert (seen["nnodes"], seen["n_gpus_per_node"]) == (2, 1)  # numbers, as the driver computed them
    assert seen["eval_url"] == driver_env["CUDA_AGENT_EVAL_URL"]
    assert (seen["train_files"], seen["actor"], seen["critic"]) == (
        driver_env["CUDA_AGENT_TRAIN_DATA"], driver_env["CUDA_AGENT_ACTOR"], driver_env["CUDA_AGENT_CRITIC"])
    assert seen["runs"] == f"{driver_env['CUDA_AGENT_RUNS']}/agentic_ppo"
