"""The episode engine, and its plain driver: query the model, run its tool calls, append the results.

    episode = Episode(env, config)                 messages = [system, task]
    while True:
        view = episode.prompt()                    a turn starts: budget left? (else: ends); fit the context
        reply = model.query(view, episode.schemas) (the driver's part)
        episode.step(reply)                        run the calls, append the results (submit, target met: ends);
                                                   no or bad call -> a message, and it counts toward the error cap

:class:`Episode` is the one engine: ``optimize``, ``bench --agent`` and the training evaluations
drive it through :func:`run_episode`; TRL's environment (``train/trl_env.py``) one tool call at a
time through :meth:`Episode.call`; verl's agent loop (``train/cluster/episode.py``) with token ids
in and out. Drivers differ only in how the model is called and in the Environment's ``verifier``
(local sandbox or the evaluation service). The prompts, the tools, the rules (repeat refusal,
error cap, turn, wall and token budgets, submit), how results are rendered and the reward are here.

Exceptions that end an episode (:class:`EpisodeEnd`) carry why (``ended_by``) and a final message,
so a driver has one exit. Everything the model can get wrong costs a turn with a message.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..sandbox.reward import outcome_reward
from .backends import BackendError, Model, ModelReply, ReplayExhausted, ToolCall
from .backends.toolcall_text import new_call_id
from .config import AgentConfig
from .context import estimate_tokens, fit_context
from .environment import Environment
from .progress import Progress
from .templating import render
from .tools import truncate
from .trajectory import FORMAT_VERSION, append_jsonl, write_json_atomic


class EpisodeEnd(Exception):
    def __init__(self, message: str, ended_by: str):
        super().__init__(message)
        self.message, self.ended_by = message, ended_by


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Episode:
    """One episode's conversation, rules, records and reward, whoever calls the model."""

    def __init__(self, env: Environment, config: AgentConfig, model_name: str = "?", progress: Progress | None = None,
                 trajectories: str | Path | None = None, meta: dict[str, Any] | None = None, save_turns: bool = True):
        self.env, self.config, self.model_name, self.save_turns = env, config, model_name, save_turns
        self.progress = progress or Progress()
        self.trajectories = Path(trajectories) if trajectories else None
        self.meta = meta or {}
        self.schemas = env.schemas()
        self.messages = initial_messages(env.task, config)
        self.steps: list[dict[str, Any]] = []
        self.verdicts: list[dict[str, Any]] = []
        self.turn = self.errors_in_row = self.refusals_in_row = 0
        self.call_keys: list[str] = []
        self.time = {"llm_s": 0.0, "tool_s": 0.0, "sandbox_s": 0.0}
        self.tokens = {"prompt": 0, "completion": 0}
        self.episode_id = uuid.uuid4().hex[:12]
        self.ended: EpisodeEnd | None = None
        self.t_start, self.started_at = time.perf_counter(), _now()
        self._context: dict[str, Any] = {}
        self.progress.start(env.task.name, model_name, str(env.run_dir))

    # ------------------------------------------------------------------ what drivers call
    def prompt(self, context_tokens: int | None = None) -> list[dict[str, Any]]:
        """Start a turn: check the budget, then the view of the conversation that fits the context."""
        self.check_limits()
        self.turn += 1
        self.env.turn = self.turn
        view, ctx = fit_context(self.messages, self.config.context, context_tokens, extra_note=self.env.best_summary())
        self._context = {"context_tokens": ctx.tokens, "context_trimmed": ctx.trimmed,
                         "context_dropped_turns": ctx.dropped_turns}
        return view

    def step(self, reply: ModelReply, llm_s: float = 0.0) -> list[dict[str, Any]]:
        """The turn's model reply: append it, run its calls; returns the messages appended after it."""
        step = self._new_step(llm_s=llm_s, **self._context)
        cpt = self.config.context.chars_per_token
        reply_msg = self.assistant_message(reply)
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else self._context.get("context_tokens", 0)
        completion = reply.completion_tokens if reply.completion_tokens is not None else estimate_tokens([reply_msg], cpt)
        step.update(prompt_tokens=prompt, completion_tokens=completion, finish_reason=reply.finish_reason)
        self.tokens["prompt"] += prompt
        self.tokens["completion"] += completion
        self.time["llm_s"] += llm_s
        self.messages.append(reply_msg)
        start = len(self.messages)
        try:
            self.run_reply(reply, step)
        finally:
            self.steps.append(step)
            self.save()
        return self.messages[start:]

    def call(self, name: str, arguments: Any) -> str:
        """One tool call outside a model turn (TRL, which parses replies and counts turns itself)."""
        if self.ended is not None:
            return f"The episode is over ({self.ended.message}); no further tool calls are run."
        self.turn += 1
        self.env.turn = self.turn
        step = self._new_step()
        try:
            self.run_call(ToolCall(new_call_id(), name, arguments), step)
        except EpisodeEnd as end:
            self.ended = end
        finally:
            self.steps.append(step)
            self.save()
        return self.messages[-1]["content"]

    @property
    def reward(self) -> float | None:
        """The outcome reward (``config.reward_kind``) of the best verified solution; -1 without one, or
        None when the last verification was a harness_error (what failed was not the policy's kernel:
        training leaves the episode out)."""
        best = self.env.best
        last = self.verdicts[-1]["verdict"] if self.verdicts else None
        return outcome_reward(best.verdict if best else None, last, self.config.reward_kind)

    # ------------------------------------------------------------------ the rules
    def check_limits(self) -> None:
        c = self.config
        if self.turn >= c.max_turns:
            raise EpisodeEnd(f"turn budget of {c.max_turns} used up", "max_turns")
        if c.max_wall_s is not None and time.perf_counter() - self.t_start >= c.max_wall_s:
            raise EpisodeEnd(f"wall-time budget of {c.max_wall_s:.0f} s used up", "max_wall_s")
        if c.max_tokens is not None and self.tokens["prompt"] + self.tokens["completion"] >= c.max_tokens:
            raise EpisodeEnd(f"token budget of {c.max_tokens} used up", "max_tokens")

    def run_reply(self, reply: ModelReply, step: dict[str, Any]) -> None:
        limit, ran = self.config.limits.max_calls_per_turn, False
        for i, call in enumerate(reply.tool_calls):
            if i >= limit:
                self.add_tool_message(call, f"not run: at most {limit} tool calls are run per reply")
            else:
                ran = self.run_call(call, step) or ran
        if reply.parse_errors and reply.tool_calls:
            self.add_note("Some <tool_call> blocks could not be read and were not run: " + "; ".join(reply.parse_errors))
        if ran:
            self.errors_in_row = 0
            return
        if not reply.tool_calls:
            self.add_note(no_call_message(reply))
        self.errors_in_row += 1
        step["error"] = True
        if self.errors_in_row >= self.config.max_consecutive_errors:
            raise EpisodeEnd(f"{self.errors_in_row} turns in a row without a runnable tool call", "format_errors")

    def run_call(self, call: ToolCall, step: dict[str, Any]) -> bool:
        """Run one call and append its result. Returns whether a tool actually ran."""
        if call.error is not None or call.arguments is None:
            self.add_tool_message(call, f"error: {call.error or 'no arguments'}. Nothing was run; send the call again "
                                        "with its arguments as a valid JSON object.")
            step["calls"].append({"name": call.name, "ok": False, "s": 0.0, "error": "bad_arguments"})
            self.progress.call(self.turn, call.name or "?", "bad arguments", False, 0.0)
            return False
        key = json.dumps([call.name, call.arguments, self.env.workspace.state_key()], sort_keys=True, default=str)
        repeats = self.config.loop_repeats
        repeated = len(self.call_keys) >= repeats and all(k == key for k in self.call_keys[-repeats:])
        self.call_keys.append(key)
        if repeated:
            self.refusals_in_row += 1
            self.add_tool_message(call, f"refused: you made this exact call {repeats} times in a row and nothing in the "
                                        "workspace changed, so the result would be the same. Do something different.")
            step["calls"].append({"name": call.name, "ok": False, "s": 0.0, "error": "loop"})
            self.progress.call(self.turn, call.name, "refused: repeated call", False, 0.0)
            if self.refusals_in_row >= repeats:
                raise EpisodeEnd(f"the model kept repeating the same {call.name} call", "loop")
            return False
        self.refusals_in_row = 0
        t0 = time.perf_counter()
        result = self.env.execute(call.name, call.arguments)
        took = time.perf_counter() - t0
        tool_s = max(0.0, took - result.sandbox_s)
        for key, value in (("tool_s", tool_s), ("sandbox_s", result.sandbox_s)):
            step[key] += value
            self.time[key] += value
        self.add_tool_message(call, result.output)
        step["calls"].append({"name": call.name, "ok": result.ok, "s": round(took, 4),
                              "sandbox_s": round(result.sandbox_s, 4), **result.info})
        first_line = result.output.splitlines()[0][:100] if result.output else ""
        self.progress.call(self.turn, call.name, _call_summary(call.arguments) or first_line, result.ok, took)
        if result.verdict is not None:
            self.verdicts.append({"turn": self.turn, "call_id": call.id, "tool": call.name,
                                  "fingerprint": result.info.get("fingerprint"), "verdict": result.verdict})
            self.progress.verdict(self.turn, result.verdict, self.env.best_summary())
        if result.submitted:
            raise EpisodeEnd(f"submitted: {self.env.best_summary()}", "submitted")
        if self.env.target_reached():
            raise EpisodeEnd(f"target reached: {self.env.best_summary()}", "target_reached")
        return not result.info.get("invalid_call", False)

    # ------------------------------------------------------------------ rendering into the conversation
    @staticmethod
    def assistant_message(reply: ModelReply) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning:
            msg["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in reply.tool_calls]
        return msg

    def add_tool_message(self, call: ToolCall, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                              "content": truncate(content, self.config.limits.max_output_chars)})

    def add_note(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        self.progress.note(self.turn, text.splitlines()[0])

    # ------------------------------------------------------------------ records
    def _new_step(self, **fields: Any) -> dict[str, Any]:
        return {"turn": self.turn, "llm_s": 0.0, "tool_s": 0.0, "sandbox_s": 0.0, "calls": [], **fields}

    def record(self, ended_by: str, final_message: str) -> dict[str, Any]:
        wall, t, best = time.perf_counter() - self.t_start, self.time, self.env.best
        timings = {"wall_s": wall, **t, "overhead_s": max(0.0, wall - t["llm_s"] - t["tool_s"] - t["sandbox_s"])}
        return {
            "format_version": FORMAT_VERSION, "episode_id": self.episode_id, "task": self.env.task.to_dict(),
            "model": {"name": self.model_name, **self.meta.get("model", {})}, "config": self.config.to_dict(),
            "started_at": self.started_at, "ended_at": _now(), "ended_by": ended_by, "final_message": final_message,
            "turns": self.turn, "messages": self.messages, "tools": self.schemas, "steps": self.steps,
            "verdicts": self.verdicts, "timings": {k: round(v, 4) for k, v in timings.items()},
            "tokens": {**self.tokens, "total": self.tokens["prompt"] + self.tokens["completion"]},
            "best": best.to_dict() if best else None, "reward": self.reward, "run_dir": str(self.env.run_dir),
            **{k: v for k, v in self.meta.items() if k != "model"},
        }

    def save(self) -> None:
        """Rewrite ``episode.json`` (after every turn unless ``save_turns`` is off: training rollouts)."""
        if self.save_turns:
            write_json_atomic(self.env.run_dir / "episode.json", self.record("running", ""))

    def finish(self, end: EpisodeEnd) -> dict[str, Any]:
        self.ended = end
        record = self.record(end.ended_by, end.message)
        write_json_atomic(self.env.run_dir / "episode.json", record)
        if self.trajectories is not None:
            append_jsonl(self.trajectories, record)
        self.progress.end(record)
        return record


def no_call_message(reply: ModelReply) -> str:
    """What the model is told when its reply had no runnable tool call."""
    if reply.parse_errors:
        return ("Your tool call could not be read: " + "; ".join(reply.parse_errors) +
                ". Nothing was run. Send it again with valid JSON.")
    if not reply.content.strip():
        return "Your reply was empty. Reply with a tool call (for example read_file on SKILL.md), or call submit."
    if reply.finish_reason == "length":
        return ("Your reply was cut off at the token limit before any tool call was complete. Write less before "
                "the call, or split large files into several write_file calls.")
    return "No tool call found in your reply. Every reply must call at least one tool; call submit when you are done."


def _call_summary(args: dict[str, Any] | None) -> str:
    for key in ("path", "command", "pattern"):
        if key in (args or {}):
            return str(args[key]).replace("\n", " ")[:100]
    return ""


def task_prompt(task, config: AgentConfig) -> str:
    """The first user message: the task's source, its input shapes, the goal and the budget."""
    module = task.load_module()

    def describe(x: Any) -> str:
        shape = getattr(x, "shape", None)
        return f"{str(x.dtype).replace('torch.', '')}{list(shape)}" if shape is not None else repr(x)[:60]

    target = config.target_speedup
    return render("task.md", task_name=task.name, task_source=task.source.strip(),
                  input_summary=", ".join(describe(x) for x in module.get_inputs()) or "none",
                  init_summary=", ".join(describe(x) for x in module.get_init_inputs()) or "none",
                  target_speedup=f"{target:.2f}" if target else "1.05", max_turns=config.max_turns)


def initial_messages(task, config: AgentConfig) -> list[dict[str, Any]]:
    """The conversation an episode starts from: the system prompt and the task message."""
    return [{"role": "system", "content": render("system.md")}, {"role": "user", "content": task_prompt(task, config)}]


def drive(episode: Episode, model: Model) -> dict[str, Any]:
    """The plain driver: ``model.query`` on the fitted context, until the episode ends."""
    while True:
        try:
            view = episode.prompt(getattr(model, "context_tokens", None))
            t0 = time.perf_counter()
            try:
                reply = model.query(view, episode.schemas)
            except ReplayExhausted as e:
                raise EpisodeEnd(str(e), "replay_exhausted") from None
            except BackendError as e:
                raise EpisodeEnd(f"the model backend failed: {e}", "backend_error") from None
            episode.step(reply, llm_s=time.perf_counter() - t0)
        except EpisodeEnd as end:
            return episode.finish(end)


def run_episode(task, model: Model, config: AgentConfig | None = None, run_dir: str | Path = "runs/episode",
                trajectories: str | Path | None = None, progress: Progress | None = None,
                meta: dict[str, Any] | None = None, verifier=None) -> dict[str, Any]:
    """One episode of ``model`` on ``task`` in ``run_dir``; returns the trajectory record.
    ``verifier(task, solution) -> Verdict`` replaces the in-process sandbox for ``verify``."""
    config = config or AgentConfig()
    env = Environment(task, Path(run_dir), config, verifier=verifier)
    meta = {**(meta or {}), "model": {"backend": type(model).__name__, **(meta or {}).get("model", {})}}
    return drive(Episode(env, config, getattr(model, "name", "?"), progress, trajectories, meta), model)


__all__ = ["Episode", "EpisodeEnd", "drive", "run_episode", "initial_messages", "task_prompt", "no_call_message"]
