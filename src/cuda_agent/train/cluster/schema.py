"""Validation of our verl configs: composed by Hydra against the installed verl's own config, and
resolved twice, as the submitting shell sees it and as a Ray worker will.

How verl reads a config (verl 0.9.1, ``verl/trainer/main_ppo.py``):

* ``main_ppo`` is a ``hydra.main`` app. ``--config-path configs/verl --config-name ppo_agentic
  hydra.searchpath=[pkg://verl.trainer.config]`` makes our file the primary config; its
  ``defaults: [ppo_trainer, _self_]`` come from verl's packaged config. :func:`compose_config`
  composes the same way, with verl's config directory found on disk (``--no-deps`` installs of
  verl cannot import ``verl.trainer.config``: ``verl/__init__`` needs torch, tensordict, Ray).
* On the driver it validates (``trainer.n_gpus_per_node * trainer.nnodes``: numbers, not strings),
  then calls ``ray.init(**ray_kwargs.ray_init)`` **unresolved**: an interpolation inside
  ``runtime_env.env_vars`` reaches Ray as its literal text.
* A ``TaskRunner`` actor resolves the config (``OmegaConf.resolve``), and ``AgentLoopWorker`` actors
  load and resolve ``agent_loops.yaml``. Every ``${oc.env:...}`` is therefore read in a Ray worker,
  whose environment comes from ``ray start`` on its node plus ``runtime_env.env_vars``, never from
  the shell that submitted the job.

What :func:`validate` checks:

* composition (Hydra's own errors);
* every key exists in verl's ``ppo_trainer`` (composed alone), except below a node verl leaves
  open (``{}`` or null there) or passed to Ray as is (:data:`PASSED_TO_RAY`);
* every value has the type of verl's default (int and float are interchangeable);
* ``runtime_env.env_vars`` are plain strings (Ray wants ``Dict[str, str]``; verl does not resolve them);
* every value, and every value of the agent-loop file, is the same on the driver and in a Ray
  worker whose environment is ``env_vars`` alone: a variable set only in the submitting shell is
  an error (``cuda-agent train verl-launch`` forwards them, :mod:`.launch`);
* the paper's numbers (:data:`PAPER`), when ``paper=True``; lengths and batch sizes agree; the
  agent loop's ``_target_`` imports; with ``check_files``, paths exist and are absolute.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

VERL_SEARCHPATH = "pkg://verl.trainer.config"
"""Where ``main_ppo`` finds verl's own configs when ours is the primary config."""
VERL_BASE = "ppo_trainer"
ENV_VARS = "ray_kwargs.ray_init.runtime_env.env_vars"
"""Set by Ray in every worker of the job (verl merges ``ray_kwargs.ray_init`` into ``ray.init``)."""
PASSED_TO_RAY = ("ray_kwargs.ray_init",)
"""Subtrees verl hands to ``ray.init`` as keyword arguments: their keys are Ray's, not verl's."""
PATH_KEYS = ("actor_rollout_ref.model.path", "critic.model.path", "data.train_files", "data.val_files",
             "actor_rollout_ref.rollout.agent.agent_loop_config_path")
"""Read by Ray workers: a relative path is relative to the worker's directory, not this shell's."""

PAPER: dict[str, Any] = {
    "algorithm.adv_estimator": "gae",
    "algorithm.gamma": 1.0,
    "algorithm.lam": 0.95,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.28,
    "actor_rollout_ref.actor.optim.lr": 3e-6,
    "critic.optim.lr": 6e-6,
    "trainer.total_training_steps": 150,
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": 150,
    "actor_rollout_ref.rollout.max_model_len": 131072,
}
PAPER_TRAJECTORIES_PER_STEP = 1024
TEXT_FORMATS = ("hermes", "llama3_json", "qwen3_coder")
_OC_ENV = re.compile(r"oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)")


class Unresolved(str):
    """A value that does not resolve (the message), kept apart from real strings."""


def verl_config_dir() -> Path:
    """The installed verl's packaged config directory, found without importing verl."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("verl is not installed: pip install 'cuda-agent[verl]' (or, to check configs "
                                  "only: pip install --no-deps verl==0.9.1 && pip install hydra-core omegaconf)")
    path = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    if not (path / f"{VERL_BASE}.yaml").is_file():
        raise FileNotFoundError(f"{path}: no {VERL_BASE}.yaml in this verl ({verl_version()})")
    return path


def verl_version() -> str:
    try:
        return version("verl")
    except PackageNotFoundError:
        return "not installed"


def compose_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()):
    """The config ``main_ppo --config-path DIR --config-name NAME hydra.searchpath=[pkg://verl.trainer.config]``
    composes, unresolved: our file primary, verl's by the search path (``file://`` of the directory
    that ``pkg://`` names, found without importing verl)."""
    from hydra import compose, initialize_config_dir

    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such config")
    with initialize_config_dir(config_dir=str(path.parent), version_base=None):
        return compose(config_name=path.stem,
                       overrides=[f"hydra.searchpath=[file://{verl_config_dir()}]", *overrides])


def verl_defaults():
    """verl's ``ppo_trainer`` alone: the keys and types a config may set."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name=VERL_BASE)


def leaves(cfg, prefix: str = "") -> Iterator[str]:
    """Dotted keys of the values of ``cfg``: scalars, lists and empty dicts."""
    from omegaconf import DictConfig

    for k in cfg:
        node = cfg._get_node(k)
        key = f"{prefix}{k}"
        if isinstance(node, DictConfig) and not node._is_none() and not node._is_interpolation() and len(node):
            yield from leaves(node, key + ".")
        else:
            yield key


def resolved(cfg, keys=None) -> dict[str, Any]:
    """``key -> value`` in the current environment; a value that does not resolve is :class:`Unresolved`."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    keys = list(leaves(cfg)) if keys is None else keys
    try:  # the whole config at once; key by key only to say which values fail
        flat = _flatten(OmegaConf.to_container(cfg, resolve=True))
        return {k: flat[k] for k in keys}
    except (OmegaConfBaseException, KeyError):
        pass
    out: dict[str, Any] = {}
    for key in keys:
        try:
            value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
            out[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except OmegaConfBaseException as e:
            out[key] = Unresolved(str(e).splitlines()[0])
    return out


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@functools.cache
def _verl_defaults_resolved(config_dir: Path) -> dict[str, Any]:
    """Once per process and verl installation (``config_dir`` is the cache key)."""
    return resolved(verl_defaults())


@contextmanager
def environment(env: Mapping[str, str]):
    """``os.environ`` is exactly ``env`` inside the block (``${oc.env:...}`` reads ``os.environ``)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def raw(cfg, key: str) -> Any:
    """The value at ``key`` as written (interpolations unresolved)."""
    from omegaconf import OmegaConf

    node = cfg
    for part in key.split("."):
        node = node._get_node(part)
    return OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node._value()


def env_names(cfg) -> set[str]:
    """Names of the variables ``cfg`` reads through ``${oc.env:NAME...}``."""
    from omegaconf import OmegaConf

    text = str(OmegaConf.to_container(cfg, resolve=False))
    return set(_OC_ENV.findall(text))


def worker_env(cfg) -> dict[str, Any]:
    """The variables Ray sets in every worker of the job: ``ray_kwargs.ray_init.runtime_env.env_vars``,
    as verl passes them (unresolved)."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, ENV_VARS)
    return dict(OmegaConf.to_container(node, resolve=False)) if node is not None else {}


def agent_loops_path(value: Any) -> Path | None:
    """``agent_loop_config_path`` as verl's ``resolve_config_path`` finds it first: absolute, or
    relative to the working directory."""
    return Path(os.path.abspath(str(value))) if value else None


def validate(path: str | Path, overrides: list[str] | tuple[str, ...] = (), paper: bool = True,
             check_files: bool = False) -> list[str]:
    """Problems with the config at ``path`` and Hydra ``overrides`` (empty: fine)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = compose_config(path, overrides)
    except (HydraException, OmegaConfBaseException) as e:
        return [f"Hydra cannot compose it with verl {verl_version()}: {e}"]
    except OSError as e:  # no such config, no verl
        return [str(e)]
    env = worker_env(cfg)
    errors = _env_var_errors(env)
    env = {k: v for k, v in env.items() if isinstance(v, str)}
    worker = resolved_in(cfg, env)
    errors += _driver_worker_errors(cfg, resolved(cfg), worker)
    errors += _schema_errors(worker)
    errors += _recipe_errors(worker, paper)
    errors += _agent_loop_errors(worker, env)
    if check_files:
        errors += _file_errors(worker)
    return errors


def _env_var_errors(env: dict[str, Any]) -> list[str]:
    errors = []
    for name, value in env.items():
        if not isinstance(value, str):
            errors.append(f"{ENV_VARS}.{name}: {value!r} ({type(value).__name__}); Ray takes strings only "
                          f"(quote it: '{value}')")
        elif "${" in value:
            errors.append(f"{ENV_VARS}.{name}: {value!r}: verl passes env_vars to ray.init unresolved, so a worker "
                          f"would get this text; give the value itself (`cuda-agent train verl-launch` does)")
    return errors


def resolved_in(cfg, env: Mapping[str, str]) -> dict[str, Any]:
    """:func:`resolved` in a process whose whole environment is ``env`` (a Ray worker's: ``env_vars``)."""
    with environment(env):
        return resolved(cfg)


def _driver_worker_errors(cfg, driver: dict[str, Any], worker: dict[str, Any]) -> list[str]:
    errors = []
    for key in driver:
        if driver[key] == worker[key] and type(driver[key]) is type(worker[key]):
            continue
        written = raw(cfg, key)
        names = sorted(set(_OC_ENV.findall(str(written))))
        hint = (f"${', $'.join(names)} is set in this shell but not in {ENV_VARS}, so Ray workers do not get it"
                if names else "it differs between this shell and a Ray worker")
        errors.append(f"{key}: {driver[key]!r} here but {worker[key]!r} in a Ray worker ({written}): {hint}; "
                      f"forward it (`cuda-agent train verl-launch` does) or set the value explicitly")
    return errors


def _schema_errors(values: dict[str, Any]) -> list[str]:
    base = _verl_defaults_resolved(verl_config_dir())
    open_nodes = [k for k, v in base.items() if v is None or v == {}]
    errors = []
    for key, value in values.items():
        if key in base:
            want = base[key]
            if not _same_type(value, want):
                errors.append(f"{key}: {value!r} ({type(value).__name__}), where verl's default is {want!r} "
                              f"({type(want).__name__})")
        elif not any(key.startswith(p + ".") for p in (*open_nodes, *PASSED_TO_RAY)):
            errors.append(f"{key}: not a key of verl {verl_version()}'s {VERL_BASE} config (typo?)")
    return errors


def _same_type(value: Any, want: Any) -> bool:
    if value is None or want is None or isinstance(value, Unresolved):
        return True  # an unresolved value is reported by the driver/worker check or the recipe checks
    if isinstance(value, bool) or isinstance(want, bool):
        return isinstance(value, bool) and isinstance(want, bool)
    if isinstance(value, (int, float)) and isinstance(want, (int, float)):
        return True
    return isinstance(value, type(want)) or isinstance(want, type(value))


def _recipe_errors(v: dict[str, Any], paper: bool) -> list[str]:
    g = v.get
    errors = []
    if paper:
        for k, want in PAPER.items():
            if g(k) != want:
                errors.append(f"{k}: {g(k)!r}, the paper's recipe has {want!r}")
        traj = _int(g("data.train_batch_size")) * _int(g("actor_rollout_ref.rollout.n"), 1)
        if traj != PAPER_TRAJECTORIES_PER_STEP:
            errors.append(f"data.train_batch_size x rollout.n = {traj} trajectories per step; the paper uses 1024")
    for a, b in (("actor_rollout_ref.rollout.prompt_length", "data.max_prompt_length"),
                 ("actor_rollout_ref.rollout.response_length", "data.max_response_length")):
        if g(a) is not None and g(b) is not None and g(a) != g(b):
            errors.append(f"{a} ({g(a)}) differs from {b} ({g(b)})")
    total = _int(g("data.max_prompt_length")) + _int(g("data.max_response_length"))
    if g("actor_rollout_ref.rollout.max_model_len") is not None and total > _int(g("actor_rollout_ref.rollout.max_model_len")):
        errors.append(f"prompt + response = {total} tokens exceeds rollout.max_model_len")
    for k in ("actor_rollout_ref.actor.ppo_mini_batch_size", "critic.ppo_mini_batch_size"):
        if g(k) is not None and _int(g("data.train_batch_size")) % max(_int(g(k)), 1):
            errors.append(f"{k} ({g(k)}) must divide data.train_batch_size ({g('data.train_batch_size')})")
    if g("algorithm.adv_estimator") == "gae" and not g("critic.model.path"):
        errors.append("algorithm.adv_estimator is gae but critic.model.path is empty")
    if g("actor_rollout_ref.rollout.multi_turn.format") not in (None, *TEXT_FORMATS):
        errors.append(f"multi_turn.format: our text parser reads {', '.join(TEXT_FORMATS)} (other formats need a "
                      "tokenizer with a response template, checked when the agent loop starts)")
    return errors


def _agent_loop_errors(v: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The agent-loop file as verl's ``AgentLoopWorker`` reads it: ``OmegaConf.load``, resolved in the worker."""
    from omegaconf import OmegaConf

    default = v.get("actor_rollout_ref.rollout.agent.default_agent_loop")
    builtin = {"single_turn_agent", "tool_agent"}
    p = agent_loops_path(v.get("actor_rollout_ref.rollout.agent.agent_loop_config_path"))
    if p is None:
        return [] if default in (None, *builtin) else [f"default_agent_loop {default!r} needs agent_loop_config_path"]
    if not p.is_file():
        return [f"agent_loop_config_path: {p} not found"]
    loops = OmegaConf.load(p)
    errors, names = [], set()
    for i, entry in enumerate(loops):
        names.add(entry.get("name"))
        target = str(entry.get("_target_", ""))
        module, _, cls = target.rpartition(".")
        try:
            if not isinstance(getattr(importlib.import_module(module), cls), type):
                errors.append(f"{p}: {target} is not a class")
        except (ImportError, AttributeError, ValueError) as e:
            errors.append(f"{p}: _target_ {target!r} does not import: {e}")
        errors += [f"{p}: [{i}].{e}" for e in _driver_worker_errors(entry, resolved(entry), resolved_in(entry, env))]
    if default not in names | builtin:
        errors.append(f"default_agent_loop {default!r} is not in {p} (has {sorted(n for n in names if n)})")
    return errors


def _file_errors(v: dict[str, Any]) -> list[str]:
    errors = []
    for k in PATH_KEYS:
        value = v.get(k)
        for item in value if isinstance(value, list) else [value]:
            if not item:
                continue
            if not Path(str(item)).exists():
                errors.append(f"{k}: {item} does not exist")
            elif not os.path.isabs(str(item)):
                errors.append(f"{k}: {item} is relative; a Ray worker reads it from its own directory, not this one "
                              f"(give {os.path.abspath(str(item))}, on storage every node sees)")
    return errors


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default
