"""Our agent loop as a verl ``AgentLoopBase``, registered for ``agent_name: cuda_agent``.

verl instantiates it per sample (``configs/verl/agent_loops.yaml`` names this class and passes
the extra keys below as constructor arguments) and awaits ``run(sampling_params, **row)``;
``row`` holds the dataset columns (``raw_prompt``, ``extra_info`` with ``task_name`` and
``task_source``). The episode itself is :func:`.episode.run_episode`; this file only adapts
verl's generator and output record. The reward is set on the output (``reward_score``), so
verl's reward manager is not called for these rows.

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

from ...tasks import Task
from ..agent_env import AgentSession, SessionConfig
from ..evaluator import evaluator_for
from .episode import EpisodeLimits, run_episode

AGENT_NAME = "cuda_agent"


@register(AGENT_NAME)
class CudaAgentLoop(AgentLoopBase):
    def __init__(self, *args, eval_url: str | None = None, reward_kind: str = "paper", max_turns: int | None = None,
                 run_root: str | None = None, tools: list[str] | None = None, max_tool_response_chars: int = 12000,
                 **kwargs):
        if not HAVE_VERL:
            raise ImportError("CudaAgentLoop runs inside verl (pip install verl); the loop itself is "
                              "cuda_agent.train.cluster.episode.run_episode")
        super().__init__(*args, **kwargs)
        rollout = self.config.actor_rollout_ref.rollout
        turns = max_turns or rollout.multi_turn.max_assistant_turns or 150
        self.limits = EpisodeLimits(max_turns=int(turns), response_length=int(rollout.response_length),
                                    max_tool_response_chars=max_tool_response_chars)
        session = SessionConfig(max_turns=int(turns), reward_kind=reward_kind, run_root=run_root)
        if tools:
            session.tools = tuple(tools)
        self.session_config = session
        self.evaluator = evaluator_for(eval_url)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
        info = kwargs.get("extra_info") or {}
        task = Task(name=str(info.get("task_name") or "task"), source=info["task_source"])
        session = AgentSession(task, self.session_config, self.evaluator)
        request_id = uuid4().hex  # sticky: every turn of this episode goes to the same server

        async def generate(prompt_ids: list[int], params: dict[str, Any]) -> list[int]:
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids,
                                                     sampling_params=params)
            return list(out.token_ids)

        try:
            ep = await run_episode(generate, self.tokenizer, session, list(kwargs["raw_prompt"]), sampling_params,
                                   self.limits)
        finally:
            session.close()
        return AgentLoopOutput(prompt_ids=ep.prompt_ids, response_ids=ep.response_ids,
                               response_mask=ep.response_mask, reward_score=ep.reward, num_turns=2 * ep.num_turns + 1,
                               metrics={}, extra_fields={"submitted": ep.submitted, "ended_by": ep.ended_by,
                                                         "verdict": (ep.verdict or {}).get("verdict", "none")})
