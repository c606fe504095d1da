"""Any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, hosted APIs), through httpx.

* Native tool calls (``tools=`` in the request, ``message.tool_calls`` in the reply). With
  ``native_tools=None`` (auto) a server that refuses tools (HTTP 400 naming tools, as vLLM does
  without ``--enable-auto-tool-choice``) is switched to the text convention for the rest of the
  episode (see ``toolcall_text``). Tool calls a model writes as text in ``content`` are parsed
  in native mode too.
* Retries with exponential backoff (honouring Retry-After) on transport errors, timeouts, 429
  and 5xx; other 4xx raise :class:`BackendError` at once.
* Token usage from ``usage``; reasoning text (``reasoning_content``) is kept.

No ``openai`` package: one POST per turn.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from . import BackendError, ModelReply
from .toolcall_text import make_call, parse_reply, to_text_messages


class ToolsUnsupported(Exception):
    pass


@dataclass
class OpenAIConfig:
    base_url: str = "http://127.0.0.1:8000/v1"
    """Endpoint root; requests go to ``{base_url}/chat/completions``."""
    model: str = "default"
    """Model name the server expects (vLLM: the served model name)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key (sent as a Bearer token when set)."""
    native_tools: bool | None = None
    """True: send tools natively; False: text convention; None: native, falling back to text."""
    temperature: float = 0.7
    top_p: float | None = None
    max_tokens: int = 8192
    """Completion tokens per reply."""
    timeout_s: float = 600.0
    """Per request (a long reply from a big model can take minutes)."""
    max_retries: int = 5
    backoff_s: float = 1.0
    """First retry delay; doubles each retry up to backoff_max_s."""
    backoff_max_s: float = 60.0
    context_tokens: int | None = None
    """The served model's context window, if known."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Merged into every request (e.g. {"top_k": 20} or chat_template_kwargs for vLLM)."""


class OpenAIBackend:
    Config = OpenAIConfig

    def __init__(self, config: OpenAIConfig):
        import httpx  # a dependency of the agent extra; imported here so the package works without it

        self.config = config
        self.name = config.model
        self.context_tokens = config.context_tokens
        self.native = config.native_tools if config.native_tools is not None else True
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._httpx = httpx
        self.client = httpx.Client(base_url=config.base_url.rstrip("/"), headers=headers,
                                   timeout=httpx.Timeout(config.timeout_s, connect=min(30.0, config.timeout_s)))
        self.retries = 0

    # ------------------------------------------------------------------ request
    def payload(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        c = self.config
        if self.native:
            wire = [_wire_message(m) for m in messages]
        else:
            wire = to_text_messages(messages, tools)
        body: dict[str, Any] = {"model": c.model, "messages": wire, "temperature": c.temperature,
                                "max_tokens": c.max_tokens}
        if c.top_p is not None:
            body["top_p"] = c.top_p
        if self.native and tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        body.update(c.extra_body)
        return body

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        try:
            data = self._post(self.payload(messages, tools))
        except ToolsUnsupported as e:
            if self.config.native_tools is not None:
                raise BackendError(f"the server refused native tool calls: {e}") from None
            self.native = False
            data = self._post(self.payload(messages, tools))
        return self.parse(data)

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        c, httpx = self.config, self._httpx
        last = ""
        for attempt in range(c.max_retries + 1):
            if attempt:
                self.retries += 1
            delay = min(c.backoff_max_s, c.backoff_s * 2 ** attempt)
            try:
                r = self.client.post("/chat/completions", json=body)
            except httpx.TimeoutException as e:
                last = f"timed out after {c.timeout_s:.0f} s ({type(e).__name__})"
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if r.status_code == 200:
                    try:
                        data = r.json()
                        data["choices"][0]["message"]
                        return data
                    except (ValueError, KeyError, IndexError, TypeError):
                        last = f"unexpected response body: {r.text[:300]}"
                elif r.status_code == 429 or r.status_code >= 500:
                    last = f"HTTP {r.status_code}: {r.text[:300]}"
                    delay = max(delay, _retry_after(r.headers.get("retry-after")))
                elif r.status_code == 400 and self.native and "tools" in body and "tool" in r.text.lower():
                    raise ToolsUnsupported(r.text[:300])
                else:
                    raise BackendError(f"{c.base_url}: HTTP {r.status_code}: {r.text[:500]}")
            if attempt < c.max_retries:
                time.sleep(min(delay, c.backoff_max_s))
        raise BackendError(f"{c.base_url}: no reply after {c.max_retries + 1} attempts; last error: {last}")

    # ------------------------------------------------------------------ reply
    def parse(self, data: dict[str, Any]) -> ModelReply:
        choice = data["choices"][0]
        msg = choice.get("message") or {}
        content = msg.get("content") or ""
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = [make_call((tc.get("function") or {}).get("name"), (tc.get("function") or {}).get("arguments"),
                           tc.get("id")) for tc in msg.get("tool_calls") or []]
        reply = ModelReply(content=content, tool_calls=calls)
        if not calls:  # no server-side parser (or it missed): the same text parser as every other path
            reply = parse_reply(content)
        usage = data.get("usage") or {}
        reply.prompt_tokens, reply.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        reply.finish_reason = choice.get("finish_reason")
        reply.reasoning = msg.get("reasoning_content") or msg.get("reasoning") or reply.reasoning
        return reply

    def close(self) -> None:
        self.client.close()


def _wire_message(m: dict[str, Any]) -> dict[str, Any]:
    """Our message -> the wire form: tool-call arguments as JSON text, as the API specifies."""
    keep = ("role", "content", "tool_calls") + (("name", "tool_call_id") if m.get("role") == "tool" else ())
    out = {k: v for k, v in m.items() if k in keep}
    if m.get("tool_calls"):
        out["tool_calls"] = [{**c, "function": {**c["function"], "arguments": c["function"]["arguments"]
                                                if isinstance(c["function"]["arguments"], str)
                                                else json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
                             for c in m["tool_calls"]]
        out.setdefault("content", None)
    return out


def _retry_after(value: str | None) -> float:
    try:
        return float(value) if value else 0.0
    except ValueError:
        return 0.0
