"""How verl is started on a Ray cluster: ``main_ppo`` with our config, and every variable the
Ray workers need passed through verl's own ``ray_kwargs.ray_init.runtime_env.env_vars``.

A Ray actor takes its environment from ``ray start`` on its node, not from the shell that submits
the job (:mod:`.schema` says where verl resolves what). So the submitting shell's values reach the
workers only as ``env_vars``, which Ray sets in every worker of the job. Forwarded (:func:`forwarded_env`):

* every variable the config or the agent-loop file reads through ``${oc.env:NAME...}``
  (paths, ``NNODES``, ``GPUS_PER_NODE``, the evaluation service's URL);
* every ``CUDA_AGENT_*`` variable set here, read by our code in the workers rather than by the
  config (e.g. the evaluation service's token, ``CUDA_AGENT_EVAL_TOKEN``).

They go in as Hydra overrides (``++ray_kwargs.ray_init.runtime_env.env_vars.NAME='value'``),
quoted so that the value arrives as the same string (:func:`hydra_quote`). verl prints
``ray init kwargs`` and the resolved config, so a secret passed this way would appear in the driver's
log: the launcher refuses to forward one (:func:`secret_values`). The evaluation service's token
travels as a file on storage every node sees, its path forwarded (``CUDA_AGENT_EVAL_TOKEN_FILE``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path

from .schema import ENV_VARS, VERL_SEARCHPATH, agent_loops_path, compose_config, env_names

FORWARDED_PREFIX = "CUDA_AGENT_"
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)
"""Names whose values :func:`printable` masks."""


class LaunchError(ValueError):
    """The job cannot be launched as asked (the message says why, never a variable's value)."""


def forwarded_env(config: str | Path, overrides: list[str] | tuple[str, ...], environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that Ray workers need, by name."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = compose_config(config, overrides)
    except (HydraException, OmegaConfBaseException, OSError) as e:
        raise LaunchError(f"Hydra cannot compose it: {e}") from e
    names = env_names(cfg)
    loops = agent_loops_path(OmegaConf.select(cfg, "actor_rollout_ref.rollout.agent.agent_loop_config_path",
                                              throw_on_resolution_failure=False))
    if loops is not None and loops.is_file():
        names |= env_names(OmegaConf.load(loops))
    names |= {n for n in environ if n.startswith(FORWARDED_PREFIX)}
    return {n: environ[n] for n in sorted(names) if n in environ}


SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|KEY)$", re.IGNORECASE)
"""A name that holds a secret itself: it ends in one of these parts (``CUDA_AGENT_EVAL_TOKEN``,
``WANDB_API_KEY``), unlike a file's path (``..._TOKEN_FILE``) or a lookalike (``..._TOKENIZER``)."""


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Forwarded names that hold a secret itself (:data:`SECRET_NAME`): verl prints its ray init kwargs
    and whole config, so their values would land in the driver's log."""
    return [n for n in env if SECRET_NAME.search(n)]


def hydra_quote(value: str) -> str:
    """``value`` as a single-quoted Hydra override value that Hydra reads back as exactly ``value``
    (backslashes escape only a quote and the backslashes before it, or at the end)."""
    if "${" in value:
        raise LaunchError("the value holds '${', which Hydra would read as an interpolation")
    out = re.sub(r"(\\*)'", lambda m: m[1] * 2 + "\\'", value)
    out = re.sub(r"(\\+)$", lambda m: m[1] * 2, out)
    return f"'{out}'"


def env_overrides(env: Mapping[str, str]) -> list[str]:
    out = []
    for name, value in env.items():
        try:
            out.append(f"++{ENV_VARS}.{name}={hydra_quote(value)}")
        except LaunchError as e:
            raise LaunchError(f"${name} cannot be forwarded to Ray workers: {e}") from None
    return out


def main_ppo_argv(config: str | Path, overrides: list[str] | tuple[str, ...], env: Mapping[str, str]) -> list[str]:
    """The command that runs verl's PPO trainer on ``config`` with ``overrides``, ``env`` forwarded."""
    config = Path(config).resolve()
    return [sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(config.parent),
            "--config-name", config.stem, f"hydra.searchpath=[{VERL_SEARCHPATH}]", *overrides, *env_overrides(env)]


def printable(argv: list[str]) -> str:
    """``argv`` for a log, with the values of secret-looking forwarded variables masked."""
    import shlex

    prefix = f"++{ENV_VARS}."
    shown = [f"{a.split('=', 1)[0]}=***" if a.startswith(prefix) and SECRET.search(a[len(prefix):].split("=", 1)[0])
             else a for a in argv]
    return shlex.join(shown)
