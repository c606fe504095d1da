"""Synthesis of KernelBench-format training tasks, in the style of CUDA-Agent-Ops-6K.

catalog (ops crawled from torch, probed) -> composer (1-5 ops chained on meta tensors)
-> filters (rubric, outcome per filter) -> decontam (vs KernelBench) + de-dup -> writer
(resumable jsonl log -> .parquet/.jsonl with Ops-6K columns). The GPU pass (:mod:`.gpu`)
completes the runtime window and inductor checks.

Entry point: ``synthesize(SynthConfig(...))``. Importing this package is cheap (no
torch); the heavy parts load when used.
"""

from .config import DEFAULT_OP_MIX, ConfigError, SynthConfig

__all__ = ["DEFAULT_OP_MIX", "ConfigError", "SynthConfig", "synthesize", "filter_file"]


def synthesize(config: SynthConfig):
    """Run (or resume) a synthesis; returns a :class:`~.pipeline.Summary`."""
    from .pipeline import synthesize as _synthesize

    return _synthesize(config)


def filter_file(src, dst, **kwargs):
    """Complete the deferred GPU checks on a file of tasks; see :func:`.gpu.filter_file`."""
    from .gpu import filter_file as _filter_file

    return _filter_file(src, dst, **kwargs)
