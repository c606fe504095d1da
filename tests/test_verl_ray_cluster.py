"""verl's settings reach the Ray workers of a real two-node cluster.

Two Ray nodes on this host, each started by ``ray start`` in an environment of its own (neither
has any ``CUDA_AGENT_*`` variable, ``NNODES`` or ``GPUS_PER_NODE``; only the worker node has the
marker ``PROBE_NODE=worker``) and in a directory of its own; the head has no CPU, so every actor
lands on the worker node. The driver is a process of its own (``tests/verl_ray_driver.py``), with
the variables set, as the submitting shell has them. It starts the job with the installed verl's
own ``run_ppo`` (its source, executed there: importing ``main_ppo`` needs verl's full
dependencies) and a probe in place of verl's ``TaskRunner``. The probe does what verl's actors do
with the config: ``OmegaConf.resolve`` (``TaskRunner.run``), then ``OmegaConf.load`` of the
agent-loop file, resolved (``AgentLoopWorker``).

* Old way (the variables exported in the driver only): the actor sees none of them, the config
  resolves to its defaults there, and the default relative agent-loop path is not found.
* New way (``cuda-agent train verl-launch``'s ``runtime_env.env_vars``): the actor sees every one.

Loopback addresses only (:data:`HEAD_IP`, :data:`WORKER_IP`; Ray's GCS still listens on every
interface, as it always does), a temporary directory, bounded waits; the nodes are stopped through their process groups (the processes this test started),
even on failure.
"""

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

if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed (pip install 'ray[default]'; .ci/run does)", allow_module_level=True)
if importlib.util.find_spec("verl") is None or importlib.util.find_spec("hydra") is None:
    pytest.skip("needs verl's main_ppo source and configs, and Hydra: pip install --no-deps verl==0.9.1 && pip install "
                "hydra-core omegaconf (.ci/run does)", allow_module_level=True)

from cuda_agent.train.cluster.launch import forwarded_env  # noqa: E402

from .conftest import ROOT  # noqa: E402

CONFIG = ROOT / "configs" / "verl" / "ppo_agentic.yaml"
DRIVER = Path(__file__).with_name("verl_ray_driver.py")
START_TIMEOUT_S = 180  # generous: two nodes on two loaded cores
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
HEAD_IP, WORKER_IP = "127.0.0.2", "127.0.0.3"
"""Two loopback addresses, one per node, as two hosts would have. (Ray replaces 127.0.0.1 itself
by the host's address; its switch that keeps it refuses a second node.)"""


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
            if s.connect_ex((HEAD_IP, port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"the Ray head did not open port {port} in {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM, then SIGKILL, to the process group of each ``ray start --block`` we started (its
    GCS, raylet and workers are in it)."""
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


@pytest.fixture(scope="module")
def cluster():
    """``HEAD_IP:PORT`` of a head (no CPU) and a worker node (1 CPU), started in different environments."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    port, client_port = _free_port(), _free_port()
    bare = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", str(temp)),
            "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--object-store-memory", str(100 * 2**20), "--block", "--disable-usage-stats"]
    procs: list[subprocess.Popen] = []
    try:
        head_log = temp / "head.log"
        procs.append(subprocess.Popen(
            [*RAY, "start", "--head", "--node-ip-address", HEAD_IP, "--port", str(port),
             "--ray-client-server-port", str(client_port), "--dashboard-agent-listen-port", str(_free_port()),
             "--num-cpus", "0", "--include-dashboard=false", "--temp-dir", str(temp), *common],
            env=bare, cwd=temp, stdout=head_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True))
        _wait_for_port(port, procs[0], head_log)
        worker_log = temp / "worker.log"
        procs.append(subprocess.Popen(
            [*RAY, "start", "--node-ip-address", WORKER_IP, "--address", f"{HEAD_IP}:{port}", "--num-cpus", "1",
             "--dashboard-agent-listen-port", str(_free_port()), *common],
            env={**bare, "PROBE_NODE": "worker"}, cwd=temp, stdout=worker_log.open("w"), stderr=subprocess.STDOUT,
            start_new_session=True))
        yield f"{HEAD_IP}:{port}"  # the driver waits for the worker node to join
    finally:
        _stop(procs)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def driver_env(tmp_path):
    """What the launcher exports in the submitting shell."""
    return {"CUDA_AGENT_EVAL_URL": "http://127.0.0.1:18420", "CUDA_AGENT_EVAL_TOKEN_FILE": str(tmp_path / "eval_token"),
            "CUDA_AGENT_TRAIN_DATA": str(tmp_path / "train.parquet"), "CUDA_AGENT_VAL_DATA": str(tmp_path / "val.parquet"),
            "CUDA_AGENT_ACTOR": str(tmp_path / "actor"), "CUDA_AGENT_CRITIC": str(tmp_path / "critic"),
            "CUDA_AGENT_LOOPS": str(ROOT / "configs" / "verl" / "agent_loops.yaml"),
            "CUDA_AGENT_RUNS": str(tmp_path / "runs"), "NNODES": "2", "GPUS_PER_NODE": "1"}


def run_job(address: str, driver_env: dict[str, str], mode: str, out: Path) -> dict:
    """The driver process (``tests/verl_ray_driver.py``) with ``driver_env``, against the cluster at ``address``."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", str(out.parent)),
           "PYTHONPATH": str(ROOT / "src"), "RAY_ADDRESS": address,
           "RAY_USAGE_STATS_ENABLED": "0", **driver_env}
    proc = subprocess.run([sys.executable, str(DRIVER), str(CONFIG), str(out), mode], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=2 * START_TIMEOUT_S, check=False)
    if proc.returncode == 3:
        pytest.skip(proc.stdout.strip())
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return json.loads(out.read_text())


def test_variables_exported_only_in_the_driver_do_not_reach_the_actor(cluster, driver_env, tmp_path):
    seen = run_job(cluster, driver_env, "old", tmp_path / "seen.json")
    assert seen["node"] == "worker"  # it ran on the node started without the variables
    assert seen["env"] == {}
    assert (seen["nnodes"], seen["n_gpus_per_node"]) == (1, 8)  # the defaults, not the driver's 2 and 1
    assert seen["train_files"] == "data/verl/agentic_train.parquet"
    assert seen["eval_url"] is None  # the default, relative agent-loop path is not there: the node runs elsewhere
    assert seen["cwd"] != str(ROOT)


def test_forwarded_variables_reach_the_actor_through_verls_runtime_env(cluster, driver_env, tmp_path):
    assert set(forwarded_env(CONFIG, (), driver_env)) == set(driver_env)  # every CUDA_AGENT_* value, the node counts
    seen = run_job(cluster, driver_env, "forward", tmp_path / "seen.json")
    assert seen["node"] == "worker"
    assert seen["env"] == driver_env
    assert (seen["nnodes"], seen["n_gpus_per_node"]) == (2, 1)  # numbers, as the driver computed them
    assert seen["eval_url"] == driver_env["CUDA_AGENT_EVAL_URL"]
    assert (seen["train_files"], seen["actor"], seen["critic"]) == (
        driver_env["CUDA_AGENT_TRAIN_DATA"], driver_env["CUDA_AGENT_ACTOR"], driver_env["CUDA_AGENT_CRITIC"])
    assert seen["runs"] == f"{driver_env['CUDA_AGENT_RUNS']}/agentic_ppo"
