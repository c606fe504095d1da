"""The agent: a ReAct loop that writes CUDA kernels in a per-task workspace, and the rollout
engine training reuses.

What it covers: the workspace in the paper's layout (``workspace``), the tools (``tools/``),
the loop with budgets, loop detection and context management (``loop``, ``context``), the LLM
backends (``backends/``: OpenAI-compatible HTTP, local transformers, replay), trajectories in
TRL's conversational tool-calling format (``trajectory``), and ``cuda-agent optimize`` on task
files or your own ``nn.Module`` (``command``, ``own_model``). What it does not cover: isolating
what the agent's ``bash`` runs (it runs as you; use a container for untrusted models), and
training (``train/``). Verification and profiling always go through the sandbox, from this
process, on a snapshot of the solution files.

Entry points: :func:`run_episode`, :class:`Episode` (the one episode engine every driver uses), :class:`Environment`, :class:`AgentConfig`,
:func:`make_backend`, :func:`initial_messages`, :func:`solve` (the solver ``cuda-agent bench --agent``
calls); records: the trajectory dict (docs/agent.md).
"""

from .backends import BACKENDS, BackendError, ModelReply, ToolCall, make_backend
from .config import AgentConfig, ContextConfig, ToolLimits
from .environment import Environment
from .command import solve
from .loop import Episode, EpisodeEnd, drive, initial_messages, run_episode
from .tools import TOOLS
from .trajectory import FORMAT_VERSION, load_jsonl, to_trl, to_trl_dataset, write_trl_jsonl

__all__ = ["BACKENDS", "BackendError", "ModelReply", "ToolCall", "make_backend", "AgentConfig", "ContextConfig",
           "ToolLimits", "Environment", "Episode", "EpisodeEnd", "drive", "run_episode", "initial_messages", "solve", "TOOLS", "FORMAT_VERSION",
           "load_jsonl", "to_trl", "to_trl_dataset", "write_trl_jsonl"]
