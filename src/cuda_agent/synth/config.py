"""Configuration of a synthesis run: one dataclass, every field documented.

Importing this module is cheap (no torch): the CLI builds a :class:`SynthConfig`
before any heavy import happens.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

# Share of tasks with 1..5 operators in CUDA-Agent-Ops-6K (paper, data section).
DEFAULT_OP_MIX: dict[int, float] = {1: 0.034, 2: 0.838, 3: 0.076, 4: 0.028, 5: 0.012}

OUTPUT_SUFFIXES = (".parquet", ".jsonl")


class ConfigError(ValueError):
    """Bad user input (unknown op, unreadable path, malformed mix). The CLI exits 2."""


@dataclass
class SynthConfig:
    """What to synthesize and where to put it.

    The per-task random stream depends only on ``seed`` and the attempt index, so a
    run is reproducible and resumable: same seed, same tasks, in the same order.
    """

    count: int = 100
    """Number of accepted tasks to write."""
    seed: int = 0
    """Base seed. Attempt ``i`` draws from ``random.Random(f"{seed}:{i}")``."""
    out: Path = Path("synth.parquet")
    """Output file, ``.parquet`` or ``.jsonl``. Work in progress lives in ``<out>.parts/``."""
    op_mix: dict[int, float] = field(default_factory=lambda: dict(DEFAULT_OP_MIX))
    """Probability of a task having N operators, N in 1..5 (normalized)."""
    kernelbench: Path | None = None
    """KernelBench checkout (``ROOT[/KernelBench]/levelN/*.py``) to decontaminate against."""
    levels: tuple[int, ...] = (1, 2, 3)
    """KernelBench levels read for decontamination (missing levels are skipped)."""
    similarity: float = 0.9
    """A task whose normalized-AST similarity to a KernelBench problem exceeds this is removed."""
    device: str = "cpu"
    """``cpu``: CPU-checkable filters, runtime ``pending``. ``cuda``: also shape scaling,
    CUDA-event timing into the window, and the inductor compile check."""
    workers: int = 2
    """Worker processes composing and checking tasks (1 = in-process, no pool)."""
    ops: tuple[str, ...] = ()
    """Restrict the catalog to these op names (e.g. ``nn.Conv2d``, ``torch.cumsum``)."""
    exclude_ops: tuple[str, ...] = ()
    """Drop these op names from the catalog."""
    max_attempts: int | None = None
    """Stop after this many attempts even if ``count`` is not reached (default 20 x count)."""
    runtime_window_ms: tuple[float, float] = (1.0, 100.0)
    """Eager-runtime window for the GPU pass."""
    llm_url: str | None = None
    """OpenAI-compatible endpoint (``.../v1``) for the optional LLM composer."""
    llm_model: str = "default"
    """Model name sent to the LLM endpoint."""
    llm_share: float = 0.0
    """Share of attempts composed by the LLM (0 = never)."""
    progress: bool = True
    """Show a progress bar (tqdm if importable, else periodic lines on stderr)."""

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        if self.kernelbench is not None:
            self.kernelbench = Path(self.kernelbench)
        self.op_mix = normalize_mix(self.op_mix)
        self.ops, self.exclude_ops = tuple(self.ops), tuple(self.exclude_ops)
        self.levels = tuple(self.levels)
        if self.count < 1:
            raise ConfigError(f"--count must be >= 1, got {self.count}")
        if self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"--device must be cpu or cuda, got {self.device!r}")
        if self.out.suffix not in OUTPUT_SUFFIXES:
            raise ConfigError(f"--out {self.out}: must end in .parquet or .jsonl")
        if not 0.0 <= self.llm_share <= 1.0:
            raise ConfigError(f"--llm-share must be in [0, 1], got {self.llm_share}")
        if self.llm_share > 0 and not self.llm_url:
            raise ConfigError("--llm-share > 0 needs --llm-url")

    @property
    def parts_dir(self) -> Path:
        return self.out.with_name(self.out.name + ".parts")

    @property
    def attempt_limit(self) -> int:
        return self.max_attempts if self.max_attempts is not None else 20 * self.count + 100

    def fingerprint(self) -> dict:
        """The fields that decide *which* tasks come out (not how many, nor how fast).

        A resumed run must match the fingerprint stored in its parts directory.
        """
        keep = ("seed", "op_mix", "kernelbench", "levels", "similarity", "device", "ops",
                "exclude_ops", "runtime_window_ms", "llm_url", "llm_model", "llm_share")
        d = {k: getattr(self, k) for k in keep}
        d["op_mix"] = {str(k): round(v, 6) for k, v in self.op_mix.items()}
        d["kernelbench"] = str(self.kernelbench.resolve()) if self.kernelbench else None
        return json.loads(json.dumps(d, default=list))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        return json.loads(json.dumps(d, default=str))


def normalize_mix(mix: dict[int, float]) -> dict[int, float]:
    """Validate an op-count mix (keys 1..5, weights >= 0, not all zero) and normalize it."""
    out: dict[int, float] = {}
    for k, v in mix.items():
        n = int(k)
        if not 1 <= n <= 5:
            raise ConfigError(f"op-count mix: {n} ops is outside 1..5")
        if float(v) < 0:
            raise ConfigError(f"op-count mix: weight for {n} ops is negative ({v})")
        out[n] = float(v)
    total = sum(out.values())
    if total <= 0:
        raise ConfigError("op-count mix: all weights are zero")
    return {k: out[k] / total for k in sorted(out)}


def parse_mix(text: str) -> dict[int, float]:
    """``"1:3.4,2:83.8,3:7.6,4:2.8,5:1.2"`` -> normalized mix. Raises ConfigError."""
    mix: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            k, v = part.split(":")
            mix[int(k)] = float(v)
        except ValueError:
            raise ConfigError(f"--mix: cannot parse {part!r} (expected N:WEIGHT, e.g. 2:83.8)") from None
    return normalize_mix(mix)
