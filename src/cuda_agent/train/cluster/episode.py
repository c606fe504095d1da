"""One agentic episode at the token level, as PPO needs it (verl's contract).

The prompt is the agent's system + task messages rendered with the tool schemas. Each turn
the policy's tokens are appended with mask 1; the tool results are rendered with the chat
template and appended with mask 0. The sequence is exactly what the policy saw and produced
(no decode/re-encode of its own tokens), which verl requires for on-policy log-probs.

``generate(prompt_ids, sampling_params) -> list[int]`` is any async token generator: verl's
``AsyncLLMServerManager`` in the cluster, :class:`OpenAICompletions` against a local server in
tests and standalone runs.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..agent_env import AgentSession

NO_CALL = "No tool call found in your reply. Every reply must call at least one tool; call submit when you are done."
Generate = Callable[[list[int], dict[str, Any]], Awaitable[list[int]]]


@dataclass
class EpisodeLimits:
    max_turns: int = 150
    """Assistant turns (paper: up to 150)."""
    response_length: int = 131072
    """Tokens after the prompt, policy and tool output together (paper: 131k context)."""
    max_tool_response_chars: int = 12000
    max_calls_per_turn: int = 8


@dataclass
class EpisodeOutput:
    """What one episode gives the trainer. Defaults mean failed."""

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    """1 where the policy generated the token, 0 for tool output and template glue."""
    reward: float = -1.0
    num_turns: int = 0
    submitted: bool = False
    ended_by: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    metrics: dict[str, float] = field(default_factory=dict)


def render_ids(tokenizer, messages, tools=None, add_generation_prompt=False) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True,
                                        add_generation_prompt=add_generation_prompt, return_dict=False)
    return list(out["input_ids"] if isinstance(out, dict) else out)


def observation_ids(tokenizer, tool_messages: list[dict[str, Any]], ended_with_eos: bool) -> list[int]:
    """Tokens that follow a generated assistant turn: the template's glue after the turn's end,
    the tool results, and the next generation prompt. Computed as a difference of renderings of
    a fixed dummy conversation (valid for prefix-preserving templates)."""
    base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    prefix = render_ids(tokenizer, base)
    full = render_ids(tokenizer, base + tool_messages, add_generation_prompt=True)
    if full[:len(prefix)] != prefix:
        raise ValueError("the chat template is not prefix-preserving")
    suffix = full[len(prefix):]
    eos = tokenizer.eos_token_id
    last_eos = max((i for i, t in enumerate(prefix) if t == eos), default=None)
    glue = prefix[last_eos + 1:] if last_eos is not None else []
    return (glue if ended_with_eos else ([eos] if eos is not None else []) + glue) + suffix


def parse_calls(text: str) -> tuple[str, list[Any], list[str]]:
    """The agent's own tool-call parser (hermes ``<tool_call>`` JSON, and XML function blocks)."""
    from ...agent.backends.toolcall_text import parse_tool_calls

    return parse_tool_calls(text)


async def run_episode(generate: Generate, tokenizer, session: AgentSession, messages: list[dict[str, Any]],
                      sampling_params: dict[str, Any], limits: EpisodeLimits) -> EpisodeOutput:
    """Run the agent loop until submit, the turn budget or the token budget."""
    loop = asyncio.get_running_loop()
    tools = session.schemas()
    out = EpisodeOutput(messages=list(messages))
    out.prompt_ids = render_ids(tokenizer, messages, tools, add_generation_prompt=True)
    t_gen = t_tool = 0.0
    out.ended_by = "max_turns"
    while out.num_turns < limits.max_turns:
        t0 = time.perf_counter()
        ids = list(await generate(out.prompt_ids + out.response_ids, sampling_params))
        t_gen += time.perf_counter() - t0
        out.num_turns += 1
        out.response_ids += ids
        out.response_mask += [1] * len(ids)
        if len(out.response_ids) >= limits.response_length:
            out.ended_by = "response_length"
            break
        text = tokenizer.decode(ids, skip_special_tokens=True)
        content, calls, errors = parse_calls(text)
        msg: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = [c.to_message() for c in calls]
        out.messages.append(msg)
        results: list[dict[str, Any]] = []
        t0 = time.perf_counter()
        for i, call in enumerate(calls):
            if i >= limits.max_calls_per_turn:
                result = f"not run: at most {limits.max_calls_per_turn} tool calls are run per reply"
            elif call.arguments is None:
                result = f"error: {call.error or 'no arguments'}. Nothing was run."
            else:
                result = await loop.run_in_executor(None, session.execute, call.name, call.arguments)
            results.append({"role": "tool", "name": call.name, "tool_call_id": call.id,
                            "content": result[: limits.max_tool_response_chars]})
        t_tool += time.perf_counter() - t0
        if session.submitted:
            out.messages += results
            out.submitted, out.ended_by = True, "submit"
            break
        if not results:
            results = [{"role": "user", "content": ("Your tool call could not be read: " + "; ".join(errors))
                        if errors else NO_CALL}]
        out.messages += results
        eos = tokenizer.eos_token_id
        obs = observation_ids(tokenizer, results, bool(ids) and ids[-1] == eos)
        out.response_ids += obs
        out.response_mask += [0] * len(obs)
        if len(out.response_ids) >= limits.response_length:
            out.ended_by = "response_length"
            break
    out.response_ids = out.response_ids[: limits.response_length]
    out.response_mask = out.response_mask[: limits.response_length]
    reward = await loop.run_in_executor(None, session.reward)
    out.reward = -1.0 if reward is None else reward  # verl needs a number: see cluster/reward.py
    out.verdict = session.best_verdict() or (session.verdicts[-1] if session.verdicts else None)
    out.metrics = {"generate_s": t_gen, "tool_s": t_tool, "verified": float(bool(session.verdicts)),
                   "harness_error": float(reward is None)}
    return out


@dataclass
class OpenAICompletions:
    """``generate`` over an OpenAI-compatible ``/v1/completions`` endpoint that takes token-id
    prompts (vLLM, SGLang): for standalone rollouts and the tests' local server."""

    url: str
    model: str
    tokenizer: Any
    max_tokens: int = 4096
    timeout_s: float = 600.0

    async def __call__(self, prompt_ids: list[int], sampling_params: dict[str, Any]) -> list[int]:
        body = {"model": self.model, "prompt": prompt_ids,
                "max_tokens": int(sampling_params.get("max_tokens", self.max_tokens)),
                "temperature": float(sampling_params.get("temperature", 1.0)),
                "top_p": float(sampling_params.get("top_p", 1.0)), "skip_special_tokens": False}
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(None, self._post, body)
        choice = data["choices"][0]
        if choice.get("token_ids"):
            return list(choice["token_ids"])
        ids = self.tokenizer.encode(choice.get("text") or "", add_special_tokens=False)
        if choice.get("finish_reason") == "stop" and self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(self.url.rstrip("/") + "/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read())
