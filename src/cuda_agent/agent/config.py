"""Agent configuration: the loop's budgets, the tools' limits and context management.

Backends carry their own ``Config`` dataclass (see ``backends/``); the sandbox has
:class:`cuda_agent.sandbox.SandboxConfig`. Every field here is documented where it is declared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..sandbox import SandboxConfig


@dataclass
class ToolLimits:
    """What one tool call may cost or return."""

    bash_timeout_s: float = 120.0
    """Default wall-clock limit of a `bash` call (the call may ask for less, or up to bash_max_timeout_s)."""
    bash_max_timeout_s: float = 600.0
    max_output_chars: int = 12_000
    """A tool result longer than this keeps its head and tail, with a marker saying how much was cut."""
    max_write_bytes: int = 400_000
    """`write_file` / `edit_file` refuse to produce a file larger than this."""
    read_max_lines: int = 400
    """`read_file` shows at most this many lines per call (it takes offset/limit to page)."""
    max_list_entries: int = 200
    """`glob` and `grep` list at most this many entries."""
    max_calls_per_turn: int = 8
    """Tool calls beyond this many in one reply are not run (each gets a message saying so)."""


@dataclass
class ContextConfig:
    """How the message history is fitted into the model's context window."""

    context_tokens: int = 32_768
    """The model's context window. Backends that know theirs (transformers) lower it to match."""
    reserve_tokens: int = 4_096
    """Room left for the reply: the prompt sent is at most context_tokens - reserve_tokens."""
    keep_last_turns: int = 6
    """The newest turns are never trimmed or dropped."""
    old_output_chars: int = 1_200
    """Near the limit, tool results older than keep_last_turns are cut to this many characters."""
    chars_per_token: float = 3.5
    """Token estimate when the backend cannot count (code and logs run about 3-4 characters per token)."""


@dataclass
class AgentConfig:
    """One episode: budgets, stop rule, tools and context. Defaults follow the CUDA Agent paper."""

    max_turns: int = 200
    """A turn is one model reply (with any number of tool calls); bad replies cost a turn too."""
    max_wall_s: float | None = None
    """Wall-clock budget of the episode (None: unlimited)."""
    max_tokens: int | None = None
    """Prompt + completion tokens over the whole episode (None: unlimited)."""
    target_speedup: float | None = 1.05
    """Stop as soon as a verified solution has speedup_vs_compile above this (the paper's 'more than
    5% faster than torch.compile'). None: never stop on speed; run until submit or the budget ends."""
    verify_on_submit: bool = True
    """On `submit`, verify the workspace if its current sources were never verified."""
    loop_repeats: int = 3
    """An identical call (same tool, same arguments, unchanged workspace) after this many in a row is
    refused with a message instead of run."""
    max_consecutive_errors: int = 25
    """End the episode after this many turns in a row that produced no runnable tool call."""
    reward_kind: str = "paper"
    """The episode's reward: ``sandbox.REWARDS[reward_kind]`` of the best verified solution (-1 without one)."""
    tools: tuple[str, ...] = ("bash", "read_file", "write_file", "edit_file", "glob", "grep", "compile",
                              "verify", "profile", "submit")
    """Tool names from ``cuda_agent.agent.tools.TOOLS``, in the order the model sees them."""
    limits: ToolLimits = field(default_factory=ToolLimits)
    context: ContextConfig = field(default_factory=ContextConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sandbox"] = {k: str(v) if k == "cache_dir" else v for k, v in d["sandbox"].items()}
        d["tools"] = list(self.tools)
        return d
