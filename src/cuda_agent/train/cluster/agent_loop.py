"""Our agent loop as a verl ``AgentLoopBase``, registered for ``agent_name: cuda_agent``.

verl instantiates it per sample (``configs/verl/agent_loops.yaml`` names this class and passes
the extra keys below as constructor arguments) and awaits ``run(sampling_params, **row)``;
``row`` holds the dataset columns (``raw_prompt``, ``extra_info`` with ``task_name`` and
``task_source``). The episode is the agent's own engine, driven at the token level by
:func:`.episode.run_episode`; this file only adapts verl's generator (token ids and log-probs),
its settings (``data.apply_chat_template_kwargs``, ``rollout.multi_turn.format``,
``response_length``, ``max_assistant_turns``) and its output record. The reward is set on the
output (``reward_score``), so verl's reward manager is not called for these rows.

verl is not installed where CI runs: without it this module still imports (the class derives
from ``object`` and says so when run), so configs and tests can name it.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

try:  # verl >= 0.5: verl.experimental.agent_loop
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
    HAVE_VERL = True
except ImportError:  # CI and laptops: no verl
    AgentLoopBase, AgentLoopOutput, HAVE_VERL = object, None, False

    def register(name):
        return lambda cls: cls

from ...agent.backends.toolcall_text import add_response_template
from ...tasks import Task
from ..agent_env import SessionConfig, close_episode, start_episode
from ..evaluator import evaluator_for
from .episode import Generated, run_episode

AGENT_NAME = "cuda_agent"
TEXT_FORMATS = ("hermes", "llama3_json", "qwen3_coder")
"""``multi_turn.format`` values our text parser reads (``toolcall_text``); any other format needs
a tokenizer with a response template."""


@register(AGENT_NAME)
class CudaAgentLoop(AgentLoopBase):
    def __init__(self, *args, eval_url: str | None = None, reward_kind: str = "paper", max_turns: int | None = None,
                 run_root: str | None = None, tools: list[str] | None = None, **kwargs):
        if not HAVE_VERL:
            raise ImportError("CudaAgentLoop runs inside verl (pip install verl); the loop itself is "
                              "cuda_agent.train.cluster.episode.run_episode")
        super().__init__(*args, **kwargs)
        rollout = self.config.actor_rollout_ref.rollout
        self.response_length = int(rollout.response_length)
        self.chat_template_kwargs = dict(self.config.data.get("apply_chat_template_kwargs") or {})
        add_response_template(self.tokenizer)
        fmt = rollout.multi_turn.get("format") or "hermes"
        if getattr(self.tokenizer, "response_template", None) is None and fmt not in TEXT_FORMATS:
            raise ValueError(f"multi_turn.format {fmt!r}: the tokenizer has no response template and our text parser "
                             f"reads only {', '.join(TEXT_FORMATS)}")
        turns = max_turns or rollout.multi_turn.max_assistant_turns or 150
        self.session = SessionConfig(max_turns=int(turns), reward_kind=reward_kind, run_root=run_root)
        if tools:
            self.session.tools = tuple(tools)
        self.evaluator = evaluator_for(eval_url)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
        info = kwargs.get("extra_info") or {}
        task = Task(name=str(info.get("task_name") or "task"), source=info["task_source"])
        episode = start_episode(task, self.session, self.evaluator)
        request_id = uuid4().hex  # sticky: every turn of this episode goes to the same server

        async def generate(prompt_ids: list[int], params: dict[str, Any]) -> Generated:
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids,
                                                     sampling_params=params)
            return Generated(list(out.token_ids), getattr(out, "log_probs", None))

        try:
            ep = await run_episode(generate, self.tokenizer, episode, sampling_params, self.response_length,
                                   self.chat_template_kwargs)
        finally:
            close_episode(episode, self.session)
        verdict = (ep.record.get("best") or {}).get("verdict") or {}
        return AgentLoopOutput(prompt_ids=ep.prompt_ids, response_ids=ep.response_ids, response_mask=ep.response_mask,
                               response_logprobs=ep.response_logprobs, reward_score=ep.reward,
                               num_turns=2 * ep.num_turns + 1, metrics={},
                               extra_fields={"submitted": ep.submitted, "ended_by": ep.ended_by,
                                             "verdict": verdict.get("verdict", "none")})
