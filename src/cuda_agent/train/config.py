"""Stage configuration through TRL's own parser: the stage's settings and the trainer's arguments
in one flat namespace, as TRL's own scripts have them.

A stage class declares ``Config`` (its own settings: model, data, sandbox, session) and
``TRAINER`` (the TRL / transformers arguments class it trains with: ``trl.GRPOConfig``,
``trl.SFTConfig`` or ``transformers.TrainingArguments``). :func:`load_stage` builds a
``trl.TrlParser`` over the two, so every field of either can be set, ``report_to`` and
``vllm_mode`` included. Values are resolved in layers, later ones winning:

1. the arguments class's own defaults (TRL's);
2. :data:`HOUSE_DEFAULTS` and :func:`device_defaults`: what our stages assume unless told
   otherwise (no external reporting, no progress bars, bf16 only where there is a GPU);
3. the stage's ``DEFAULTS`` (the paper's numbers, e.g. clip 0.2/0.28; these make the ``paper`` preset);
4. the preset (:mod:`.presets`);
5. ``values``: what a caller wires in (the recipe: each stage's model and output directory);
6. the YAML file (``--config FILE``), read by ``TrlParser`` (its ``env:`` block sets environment
   variables);
7. ``--set key=value`` overrides, each converted by the parser's own type for that field
   (``--set learning_rate=1e-5``, ``--set report_to=tensorboard``; a list field takes several
   space-separated values, ``--set "tools=write_file compile verify submit"``). ``report_to`` is a
   string on transformers' command line, one integration; give several in YAML (``report_to: [wandb,
   tensorboard]``).

A key that neither dataclass has is a :class:`ConfigError` naming the source and the key, and so is
a value the field's type rejects.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

HOUSE_DEFAULTS: dict[str, Any] = dict(
    report_to="none", disable_tqdm=True, logging_steps=1, save_strategy="steps", save_steps=10, save_total_limit=3,
    lr_scheduler_type="constant_with_warmup", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, seed=0,
    dataloader_num_workers=0, remove_unused_columns=False, gradient_checkpointing=False)
"""Trainer arguments every stage starts from (all overridable). Our run log (:mod:`.metrics`) writes
CSV, PNG and TensorBoard itself, hence ``report_to="none"``; set it to ``tensorboard`` or ``wandb``
to add the trainer's own reporting."""


class ConfigError(ValueError):
    """A stage configuration that cannot be built: unknown key, bad value, unreadable file."""


def device_defaults() -> dict[str, Any]:
    """bf16 where there is a GPU; the CPU trains in fp32 (``use_cpu``)."""
    import torch

    cuda = torch.cuda.is_available()
    return dict(bf16=cuda, use_cpu=not cuda)


def resolve_class(spec: str):
    """``"module:Name"`` -> the object."""
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def make_parser(dataclass_types: list[type], what: str):
    """A ``trl.TrlParser`` over ``dataclass_types`` whose argparse errors raise :class:`ConfigError`
    (one sentence, no usage dump of a few hundred options)."""
    from trl import TrlParser

    class _Parser(TrlParser):
        def error(self, message):  # argparse calls this for every parse error
            raise ConfigError(f"{what}: {message}")

    return _Parser(dataclass_types, allow_abbrev=False)


def known_keys(parser) -> set[str]:
    return {a.dest for a in parser._actions if a.dest != "help"}


def check_keys(keys, parser, source: str, what: str) -> None:
    """Raise :class:`ConfigError` for the first key the parser does not have."""
    valid = known_keys(parser)
    for key in keys:
        if key.replace("-", "_") not in valid:
            near = difflib.get_close_matches(key, sorted(valid), n=3)
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise ConfigError(f"{source}: unknown key {key!r} for {what}{hint}")


def override_args(overrides: list[str], parser, what: str) -> list[str]:
    """``key=value`` strings as the parser's own ``--key value`` arguments. A list-valued field
    takes several whitespace-separated values (``tools=write_file compile verify submit``)."""
    import shlex

    actions = {a.dest: a for a in parser._actions}
    out: list[str] = []
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        key = key.strip().replace("-", "_")
        check_keys([key], parser, f"--set {item}", what)
        many = actions[key].nargs in ("+", "*")
        out += [f"--{key}", *(shlex.split(raw) if many else [raw])]
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read ({e.__class__.__name__}: {e})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a YAML mapping of keys to values")
    return data


def parse_layers(dataclass_types: list[type], what: str, layers: dict[str, dict[str, Any]],
                 config_file: str | Path | None = None, overrides: list[str] = ()) -> tuple:
    """Instances of ``dataclass_types`` from the named default ``layers`` (lowest first), then the
    YAML file, then ``key=value`` overrides, all through one ``TrlParser``."""
    parser = make_parser(dataclass_types, what)
    for source, layer in layers.items():
        check_keys(layer, parser, source, what)
        parser.set_defaults_with_config(**layer)
    args: list[str] = []
    if config_file is not None:
        check_keys([k for k in read_yaml(config_file) if k != "env"], parser, str(config_file), what)
        args += ["--config", str(config_file)]
    args += override_args(list(overrides), parser, what)
    try:
        return tuple(parser.parse_args_and_config(args))
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:  # an arguments class's own checks (__post_init__)
        raise ConfigError(f"{what}: {e}") from None


def load_stage(stage: str, preset: str = "paper", config_file: str | Path | None = None,
               values: dict[str, Any] | None = None, overrides: list[str] = ()):
    """The stage ``(Config, trainer arguments)`` pair, resolved in the layers described above."""
    from .presets import PRESETS, stage_class

    if preset not in PRESETS:
        raise ConfigError(f"preset {preset!r}: expected one of {', '.join(PRESETS)}")
    cls = stage_class(stage)
    layers = {"HOUSE_DEFAULTS": HOUSE_DEFAULTS, "device_defaults()": device_defaults(),
              f"{cls.__name__}.DEFAULTS": getattr(cls, "DEFAULTS", {}), f"preset {preset}": PRESETS[preset](stage),
              "given values": values or {}}
    config, trainer = parse_layers([cls.Config, resolve_class(cls.TRAINER)], f"stage {stage}", layers,
                                   config_file, overrides)
    return config, trainer


def resolved(config: Any, trainer: Any) -> dict[str, Any]:
    """Both halves of a stage configuration as JSON-ready dicts (what ``config.json`` and
    ``--print-config`` show)."""
    return {"stage": asdict(config), "trainer": trainer.to_dict()}


def merged_yaml(values: dict[str, Any], config_file: str | Path | None = None) -> str:
    """Layers 5 and 6 (``values``, then the YAML file's keys) as one YAML file: what a launched
    stage process gets with ``--config`` to resolve the same settings (it applies layers 1-4 itself,
    and the ``--set`` overrides come on its command line)."""
    import yaml

    merged = {k: v for k, v in values.items() if v is not None}
    merged.update(read_yaml(config_file) if config_file is not None else {})
    return yaml.safe_dump(merged, sort_keys=False)
