"""The submitting side of ``tests/test_verl_ray_cluster.py``, run as its own process (the shell
that submits a verl job): ``python tests/verl_ray_driver.py CONFIG OUT old|forward``.

It composes ``CONFIG`` (``forward``: with the overrides ``cuda-agent train verl-launch`` adds,
from this process's environment) and hands it to the installed verl's own ``run_ppo``, which
calls ``ray.init`` (``RAY_ADDRESS``) and starts the job's ``TaskRunner``: here a probe that does
what verl's actors do with the config and writes what it saw to ``OUT``.

Exit 3: this verl has no ``run_ppo`` to run.
"""

import ast
import os
import sys
import time
from pathlib import Path

import ray
from omegaconf import OmegaConf

from cuda_agent.train.cluster.launch import env_overrides, forwarded_env
from cuda_agent.train.cluster.schema import compose_config, verl_config_dir

NODES_TIMEOUT_S = 180


def verl_run_ppo():
    """``run_ppo`` from the installed verl's ``main_ppo.py``: the code that turns the config into
    ``ray.init(...)`` and starts the ``TaskRunner``. Its module needs verl's full dependencies, so
    the function is compiled from the source with the names it uses; ``get_ppo_ray_runtime_env``
    (verl's NCCL/vLLM defaults, which need torch's device probe) gives those defaults' shape."""
    src = verl_config_dir().parent / "main_ppo.py"
    tree = ast.parse(src.read_text())
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_ppo"), None)
    if fn is None:
        print(f"{src} has no run_ppo: see how this verl starts Ray before trusting the launcher")
        sys.exit(3)
    namespace = {"os": os, "ray": ray, "OmegaConf": OmegaConf, "is_cuda_available": False,
                 "get_ppo_ray_runtime_env": lambda config=None: {"env_vars": {"TOKENIZERS_PARALLELISM": "true"},
                                                                 "working_dir": None}}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(src), "exec"), namespace)  # noqa: S102
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
                "node": os.environ.get("PROBE_NODE"), "cwd": os.getcwd(),
                "env": {k: v for k, v in os.environ.items() if k.startswith("CUDA_AGENT_")
                        or k in ("NNODES", "GPUS_PER_NODE")},
                "nnodes": config.trainer.nnodes, "n_gpus_per_node": config.trainer.n_gpus_per_node,
                "train_files": config.data.train_files, "actor": config.actor_rollout_ref.model.path,
                "critic": config.critic.model.path, "runs": config.trainer.default_local_dir,
                "eval_url": OmegaConf.to_container(loops, resolve=True)[0]["eval_url"] if loops else None,
            }
            with open(out, "w") as f:
                json.dump(seen, f)

    return Probe


def wait_for_nodes(n: int) -> None:
    """Until ``n`` nodes are alive (so the probe can be placed), then disconnect: ``run_ppo`` connects itself."""
    ray.init()
    try:
        deadline = time.monotonic() + NODES_TIMEOUT_S
        while sum(node["Alive"] for node in ray.nodes()) < n:
            if time.monotonic() > deadline:
                sys.exit(f"fewer than {n} Ray nodes after {NODES_TIMEOUT_S} s")
            time.sleep(0.5)
    finally:
        ray.shutdown()


def main(config: str, out: str, mode: str) -> None:
    overrides = env_overrides(forwarded_env(config, (), os.environ)) if mode == "forward" else []
    cfg = compose_config(config, overrides)
    run_ppo = verl_run_ppo()
    wait_for_nodes(2)
    try:
        run_ppo(cfg, probe_class(Path(out)))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
