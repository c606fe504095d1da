"""LLM backends: the Model side of the loop.

A backend turns (messages, tool schemas) into one :class:`ModelReply`: text plus parsed tool
calls, token counts and the time it took. Messages are OpenAI chat messages (assistant
``tool_calls`` carry ``arguments`` as a dict; ``role: tool`` messages carry results); each backend
converts them to what its server or chat template wants.

Backends (one file + one :data:`BACKENDS` entry each, imported only when used):

* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, hosted), httpx,
  native tool calls with a text fallback, retries with exponential backoff.
* ``local``: a transformers causal LM in this process (chat template with ``tools=``).
* ``replay``: replays recorded assistant turns (tests, benchmarks).

Failures that are not the model's fault (the server is down after every retry, a request it
refuses) raise :class:`BackendError`; the loop ends the episode with that message.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol

BACKENDS: dict[str, str] = {
    "openai": "cuda_agent.agent.backends.openai_compat:OpenAIBackend",
    "local": "cuda_agent.agent.backends.transformers_local:TransformersBackend",
    "replay": "cuda_agent.agent.backends.replay:ReplayBackend",
}


class BackendError(RuntimeError):
    """The backend could not produce a reply (not a format problem of the model's)."""


class ReplayExhausted(BackendError):
    """A replay backend has no recorded turn left."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | None
    """Parsed arguments, or None when they were not a JSON object (see ``error``)."""
    raw_arguments: str = ""
    error: str | None = None

    def to_message(self) -> dict[str, Any]:
        """OpenAI ``tool_calls`` entry, with the arguments as an object (TRL/transformers form),
        or the raw text when they could not be parsed."""
        args: Any = self.arguments if self.arguments is not None else self.raw_arguments
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass
class ModelReply:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    """Tool calls written as text that could not be parsed, one message each."""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    reasoning: str | None = None


class Model(Protocol):
    """What the loop needs from a backend."""

    name: str
    context_tokens: int | None
    """The model's context window when the backend knows it, else None."""

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply: ...


def make_backend(kind: str, **config: Any) -> Model:
    """Build backend ``kind`` from keyword arguments of its ``Config`` dataclass."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r}; known: {', '.join(BACKENDS)}")
    module, cls_name = BACKENDS[kind].split(":")
    cls = getattr(importlib.import_module(module), cls_name)
    return cls(cls.Config(**config))


__all__ = ["BACKENDS", "BackendError", "ReplayExhausted", "ToolCall", "ModelReply", "Model", "make_backend"]
