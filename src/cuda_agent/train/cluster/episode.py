"""verl's driver of the agent's episode engine: token ids in, token ids and log-probs out.

The engine is the agent's :class:`~cuda_agent.agent.Episode` (prompts, tools, rules, rendering of
results, reward); this file only does what token-level PPO needs:

* the prompt is the engine's system + task messages rendered with its tool schemas and the data's
  ``apply_chat_template_kwargs`` (e.g. ``enable_thinking`` for Qwen3), on every rendering;
* each turn the policy's tokens are appended with mask 1 and their rollout log-probs; the
  messages the engine appended after the reply (tool results, notes) are rendered with the chat
  template and appended with mask 0. The policy's own tokens are never decoded and re-encoded;
* replies are parsed by the agent's one parser (``parse_reply``: the tokenizer's response
  template, else the text convention);
* ``Episode.step`` (tools, verify through the evaluation service) runs in a thread pool of its
  own, so blocking tools never hold the event loop and never take the default executor's threads.

``generate(prompt_ids, sampling_params) -> Generated`` is any async token generator: verl's
``AsyncLLMServerManager`` in the cluster, a ``/v1/completions`` server in the tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ...agent import Episode, EpisodeEnd
from ...agent.backends.toolcall_text import parse_reply

TOOL_THREADS = ThreadPoolExecutor(max_workers=256, thread_name_prefix="cuda-agent-tools")
"""Episode steps (tools, builds, waiting on the evaluation service) run here: mostly waiting, so
many threads; apart from asyncio's default executor, which verl uses for its own work."""


@dataclass
class Generated:
    token_ids: list[int]
    log_probs: list[float] | None = None


Generate = Callable[[list[int], dict[str, Any]], Awaitable[Generated]]


@dataclass
class EpisodeOutput:
    """What one episode gives the trainer. Defaults mean failed."""

    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    """1 where the policy generated the token, 0 for tool output and template glue."""
    response_logprobs: list[float] | None = None
    """The rollout's log-prob of each response token (0 where the mask is 0); None when the
    generator gave none."""
    reward: float = -1.0
    num_turns: int = 0
    ended_by: str = ""
    record: dict[str, Any] = field(default_factory=dict)
    """The engine's trajectory record (messages, calls, verdicts), as ``cuda-agent optimize`` writes it."""
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def submitted(self) -> bool:
        return self.ended_by == "submitted"


def render_ids(tokenizer, messages, tools=None, add_generation_prompt=False, **template_kwargs) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True, return_dict=False,
                                        add_generation_prompt=add_generation_prompt, **template_kwargs)
    return list(out["input_ids"] if isinstance(out, dict) else out)


def observation_ids(tokenizer, messages: list[dict[str, Any]], ended_with_eos: bool, **template_kwargs) -> list[int]:
    """Tokens after a generated assistant turn: the template's glue after the turn's end token, the
    engine's new messages, and the next generation prompt. The messages are rendered after a dummy
    user turn and that turn's rendering is cut off (the dummy keeps templates that open with a
    default system prompt or a date header from repeating it)."""
    base = [{"role": "user", "content": "x"}]
    prefix = render_ids(tokenizer, base, **template_kwargs)
    full = render_ids(tokenizer, base + messages, add_generation_prompt=True, **template_kwargs)
    if full[:len(prefix)] != prefix:
        raise ValueError("the chat template does not render a conversation as a prefix of its continuation")
    eos = tokenizer.eos_token_id
    last_eos = max((i for i, t in enumerate(prefix) if t == eos), default=None)
    glue = prefix[last_eos + 1:] if last_eos is not None else []
    return ([] if ended_with_eos or eos is None else [eos]) + glue + full[len(prefix):]


async def run_episode(generate: Generate, tokenizer, episode: Episode, sampling_params: dict[str, Any],
                      response_length: int, chat_template_kwargs: dict[str, Any] | None = None) -> EpisodeOutput:
    """Drive ``episode`` until it ends (submit, its budgets) or the response reaches ``response_length`` tokens."""
    loop = asyncio.get_running_loop()
    kw = dict(chat_template_kwargs or {})
    out = EpisodeOutput(response_logprobs=[])
    out.prompt_ids = render_ids(tokenizer, episode.messages, episode.schemas, add_generation_prompt=True, **kw)
    t_gen = t_step = 0.0
    try:
        while True:
            episode.prompt()  # the budget check; the sequence is append-only, so the context view is not sent
            context = out.prompt_ids + out.response_ids
            t0 = time.perf_counter()
            gen = await generate(context, sampling_params)
            llm_s = time.perf_counter() - t0
            t_gen += llm_s
            ids = list(gen.token_ids)
            out.num_turns += 1
            out.response_ids += ids
            out.response_mask += [1] * len(ids)
            if gen.log_probs is None or out.response_logprobs is None:
                out.response_logprobs = None
            else:
                out.response_logprobs += list(gen.log_probs)
            if len(out.response_ids) >= response_length:
                raise EpisodeEnd(f"response budget of {response_length} tokens used up", "response_length")
            ended_with_eos = bool(ids) and ids[-1] == tokenizer.eos_token_id
            reply = parse_reply(tokenizer.decode(ids, skip_special_tokens=True), tokenizer, ids=ids, prefix=context,
                                tools=episode.schemas)
            reply.prompt_tokens, reply.completion_tokens = len(context), len(ids)
            reply.finish_reason = "stop" if ended_with_eos else "length"
            t0 = time.perf_counter()
            new = await loop.run_in_executor(TOOL_THREADS, episode.step, reply, llm_s)
            obs = observation_ids(tokenizer, new, ended_with_eos, **kw)
            t_step += time.perf_counter() - t0
            out.response_ids += obs
            out.response_mask += [0] * len(obs)
            if out.response_logprobs is not None:
                out.response_logprobs += [0.0] * len(obs)
            if len(out.response_ids) >= response_length:
                raise EpisodeEnd(f"response budget of {response_length} tokens used up", "response_length")
    except EpisodeEnd as end:
        out.record = await loop.run_in_executor(TOOL_THREADS, episode.finish, end)
    for name in ("response_ids", "response_mask", "response_logprobs"):
        if getattr(out, name) is not None:
            setattr(out, name, getattr(out, name)[:response_length])
    reward = out.record["reward"]
    out.ended_by, out.reward = out.record["ended_by"], -1.0 if reward is None else reward  # verl needs a number
    out.metrics = {"generate_s": t_gen, "step_s": t_step, "verified": float(bool(episode.verdicts)),
                   "harness_error": float(reward is None)}
    return out
