"""The ReAct loop: query the model, run its tool calls, append the results; repeat.

    messages = [system, task]
    while True:
        check the budget                          -> LimitsExceeded
        reply = model.query(fit_context(messages), tools)
        for call in reply.tool_calls:
            messages += tool result               (submit -> Submitted, target met -> TargetReached)
        no call / bad call                        -> a message saying what was wrong (costs the turn)

Exceptions that end an episode (:class:`EpisodeEnd` and subclasses) carry why (``ended_by``) and
a final message, so :meth:`Agent.run` has one exit. :class:`FormatError` ends only the turn.
Everything the model can get wrong (no tool call, unknown tool, bad JSON, wrong arguments,
oversized writes, the same call over and over) costs a turn with a message, never a crash.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .backends import BackendError, Model, ModelReply, ReplayExhausted, ToolCall
from .config import AgentConfig
from .context import estimate_tokens, fit_context
from .environment import Environment
from .progress import Progress
from .templating import render
from .tools import ToolResult, truncate
from .trajectory import FORMAT_VERSION, append_jsonl, write_json_atomic


class EpisodeEnd(Exception):
    ended_by = "ended"

    def __init__(self, message: str, ended_by: str | None = None):
        super().__init__(message)
        self.message = message
        if ended_by:
            self.ended_by = ended_by


class Submitted(EpisodeEnd):
    ended_by = "submitted"


class TargetReached(EpisodeEnd):
    ended_by = "target_reached"


class LimitsExceeded(EpisodeEnd):
    ended_by = "limits"


class FormatError(Exception):
    """The reply had nothing runnable: the message tells the model what to do instead."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _call_summary(name: str, args: dict[str, Any] | None) -> str:
    args = args or {}
    for key in ("path", "command", "pattern"):
        if key in args:
            return str(args[key]).replace("\n", " ")[:100]
    return ""


class Agent:
    def __init__(self, model: Model, env: Environment, config: AgentConfig, progress: Progress | None = None,
                 trajectories: str | Path | None = None, meta: dict[str, Any] | None = None):
        self.model, self.env, self.config = model, env, config
        self.progress = progress or Progress()
        self.trajectories = Path(trajectories) if trajectories else None
        self.meta = meta or {}
        self.messages: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.verdicts: list[dict[str, Any]] = []
        self.turn = 0
        self.errors_in_row = 0
        self.call_keys: list[str] = []
        self.refusals_in_row = 0
        self.time = {"llm_s": 0.0, "tool_s": 0.0, "sandbox_s": 0.0}
        self.tokens = {"prompt": 0, "completion": 0}
        self.episode_id = uuid.uuid4().hex[:12]
        self.context_tokens = getattr(model, "context_tokens", None)

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        self.t_start = time.perf_counter()
        self.started_at = _now()
        self.schemas = self.env.schemas()
        self.messages = initial_messages(self.env.task, self.config)
        self.progress.start(self.env.task.name, getattr(self.model, "name", "?"), str(self.env.run_dir))
        while True:
            try:
                self.step()
            except EpisodeEnd as end:
                return self.finish(end)

    def step(self) -> None:
        self.check_limits()
        self.turn += 1
        self.env.turn = self.turn
        step = {"turn": self.turn, "llm_s": 0.0, "tool_s": 0.0, "sandbox_s": 0.0, "calls": []}
        try:
            reply = self.query(step)
            self.run_reply(reply, step)
        finally:
            self.steps.append(step)
            self.save()

    def query(self, step: dict[str, Any]) -> ModelReply:
        view, ctx = fit_context(self.messages, self.config.context, self.context_tokens,
                                extra_note=self.env.best_summary())
        step.update(context_tokens=ctx.tokens, context_trimmed=ctx.trimmed, context_dropped_turns=ctx.dropped_turns)
        t0 = time.perf_counter()
        try:
            reply = self.model.query(view, self.schemas)
        except ReplayExhausted as e:
            raise EpisodeEnd(str(e), "replay_exhausted") from None
        except BackendError as e:
            raise EpisodeEnd(f"the model backend failed: {e}", "backend_error") from None
        finally:
            step["llm_s"] = time.perf_counter() - t0
            self.time["llm_s"] += step["llm_s"]
        cpt = self.config.context.chars_per_token
        prompt = reply.prompt_tokens if reply.prompt_tokens is not None else ctx.tokens
        completion = reply.completion_tokens if reply.completion_tokens is not None else \
            estimate_tokens([{"content": reply.content, "tool_calls": [c.to_message() for c in reply.tool_calls]}], cpt)
        step.update(prompt_tokens=prompt, completion_tokens=completion, finish_reason=reply.finish_reason)
        self.tokens["prompt"] += prompt
        self.tokens["completion"] += completion
        msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning:
            msg["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            msg["tool_calls"] = [c.to_message() for c in reply.tool_calls]
        self.messages.append(msg)
        return reply

    def run_reply(self, reply: ModelReply, step: dict[str, Any]) -> None:
        try:
            if not reply.tool_calls:
                raise FormatError(self.no_call_message(reply))
            ran = False
            limit = self.config.limits.max_calls_per_turn
            for i, call in enumerate(reply.tool_calls):
                if i >= limit:
                    self.add_tool_message(call, f"not run: at most {limit} tool calls are run per reply")
                    continue
                ran = self.run_call(call, step) or ran
            if reply.parse_errors:
                self.messages.append({"role": "user", "content": "Some <tool_call> blocks could not be read and were "
                                      "not run: " + "; ".join(reply.parse_errors)})
            if not ran:
                raise FormatError("")
            self.errors_in_row = 0
        except FormatError as e:
            if e.message:
                self.messages.append({"role": "user", "content": e.message})
                self.progress.note(self.turn, e.message.splitlines()[0])
            self.errors_in_row += 1
            step["error"] = True
            if self.errors_in_row >= self.config.max_consecutive_errors:
                raise EpisodeEnd(f"{self.errors_in_row} turns in a row without a runnable tool call",
                                 "format_errors") from None

    def no_call_message(self, reply: ModelReply) -> str:
        if reply.parse_errors:
            return ("Your tool call could not be read: " + "; ".join(reply.parse_errors) +
                    ". Nothing was run. Send it again with valid JSON.")
        if not reply.content.strip():
            return "Your reply was empty. Reply with a tool call (for example read_file on SKILL.md), or call submit."
        if reply.finish_reason == "length":
            return ("Your reply was cut off at the token limit before any tool call was complete. Write less before "
                    "the call, or split large files into several write_file calls.")
        return ("No tool call found in your reply. Every reply must call at least one tool; call submit when you "
                "are done.")

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
        if len(self.call_keys) >= repeats and all(k == key for k in self.call_keys[-repeats:]):
            self.refusals_in_row += 1
            self.call_keys.append(key)
            self.add_tool_message(call, f"refused: you made this exact call {repeats} times in a row and nothing in the "
                                        "workspace changed, so the result would be the same. Do something different.")
            step["calls"].append({"name": call.name, "ok": False, "s": 0.0, "error": "loop"})
            self.progress.call(self.turn, call.name, "refused: repeated call", False, 0.0)
            if self.refusals_in_row >= repeats:
                raise EpisodeEnd(f"the model kept repeating the same {call.name} call", "loop")
            return False
        self.refusals_in_row = 0
        self.call_keys.append(key)
        t0 = time.perf_counter()
        result = self.env.execute(call.name, call.arguments)
        took = time.perf_counter() - t0
        tool_s = max(0.0, took - result.sandbox_s)
        step["tool_s"] += tool_s
        step["sandbox_s"] += result.sandbox_s
        self.time["tool_s"] += tool_s
        self.time["sandbox_s"] += result.sandbox_s
        self.add_tool_message(call, result.output)
        step["calls"].append({"name": call.name, "ok": result.ok, "s": round(took, 4),
                              "sandbox_s": round(result.sandbox_s, 4), **result.info})
        first_line = result.output.splitlines()[0][:100] if result.output else ""
        self.progress.call(self.turn, call.name, _call_summary(call.name, call.arguments) or first_line, result.ok, took)
        self.after_result(call, result)
        return not result.info.get("invalid_call", False)

    def after_result(self, call: ToolCall, result: ToolResult) -> None:
        if result.verdict is not None:
            self.verdicts.append({"turn": self.turn, "call_id": call.id, "tool": call.name,
                                  "fingerprint": result.info.get("fingerprint"), "verdict": result.verdict})
            self.progress.verdict(self.turn, result.verdict, self.env.best_summary())
        if result.submitted:
            raise Submitted(f"submitted: {self.env.best_summary()}")
        if self.env.target_reached():
            raise TargetReached(f"target reached: {self.env.best_summary()}")

    def add_tool_message(self, call: ToolCall, content: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name,
                              "content": truncate(content, self.config.limits.max_output_chars)})

    def check_limits(self) -> None:
        c = self.config
        if self.turn >= c.max_turns:
            raise LimitsExceeded(f"turn budget of {c.max_turns} used up", "max_turns")
        if c.max_wall_s is not None and time.perf_counter() - self.t_start >= c.max_wall_s:
            raise LimitsExceeded(f"wall-time budget of {c.max_wall_s:.0f} s used up", "max_wall_s")
        if c.max_tokens is not None and self.tokens["prompt"] + self.tokens["completion"] >= c.max_tokens:
            raise LimitsExceeded(f"token budget of {c.max_tokens} used up", "max_tokens")

    # ------------------------------------------------------------------ records
    def task_message(self) -> str:
        return task_prompt(self.env.task, self.config)

    def record(self, ended_by: str, final_message: str) -> dict[str, Any]:
        wall = time.perf_counter() - self.t_start
        t = self.time
        best = self.env.best
        timings = {"wall_s": round(wall, 4), "llm_s": round(t["llm_s"], 4), "tool_s": round(t["tool_s"], 4),
                   "sandbox_s": round(t["sandbox_s"], 4),
                   "overhead_s": round(max(0.0, wall - t["llm_s"] - t["tool_s"] - t["sandbox_s"]), 4)}
        return {
            "format_version": FORMAT_VERSION,
            "episode_id": self.episode_id,
            "task": self.env.task.to_dict(),
            "model": {"name": getattr(self.model, "name", "?"), "backend": type(self.model).__name__,
                      **self.meta.get("model", {})},
            "config": self.config.to_dict(),
            "started_at": self.started_at,
            "ended_at": _now(),
            "ended_by": ended_by,
            "final_message": final_message,
            "turns": self.turn,
            "messages": self.messages,
            "tools": self.schemas,
            "steps": self.steps,
            "verdicts": self.verdicts,
            "timings": timings,
            "tokens": {**self.tokens, "total": self.tokens["prompt"] + self.tokens["completion"]},
            "best": best.to_dict() if best else None,
            "reward": float(best.verdict.get("reward", -1.0)) if best else -1.0,
            "run_dir": str(self.env.run_dir),
            **{k: v for k, v in self.meta.items() if k != "model"},
        }

    def save(self) -> None:
        write_json_atomic(self.env.run_dir / "episode.json", self.record("running", ""))

    def finish(self, end: EpisodeEnd) -> dict[str, Any]:
        record = self.record(end.ended_by, end.message)
        write_json_atomic(self.env.run_dir / "episode.json", record)
        if self.trajectories is not None:
            append_jsonl(self.trajectories, record)
        self.progress.end(record)
        return record


def task_prompt(task, config: AgentConfig) -> str:
    """The first user message: the task's source, its input shapes, the goal and the budget."""
    module = task.load_module()
    inputs, init = module.get_inputs(), module.get_init_inputs()

    def describe(x: Any) -> str:
        shape = getattr(x, "shape", None)
        if shape is not None:
            return f"{str(x.dtype).replace('torch.', '')}{list(shape)}"
        return repr(x)[:60]

    target = config.target_speedup
    return render("task.md", task_name=task.name, task_source=task.source.strip(),
                  input_summary=", ".join(describe(x) for x in inputs) or "none",
                  init_summary=", ".join(describe(x) for x in init) or "none",
                  target_speedup=f"{target:.2f}" if target else "1.05", max_turns=config.max_turns)


def initial_messages(task, config: AgentConfig) -> list[dict[str, Any]]:
    """The conversation an episode starts from: the system prompt and the task message."""
    return [{"role": "system", "content": render("system.md")}, {"role": "user", "content": task_prompt(task, config)}]


def run_episode(task, model: Model, config: AgentConfig | None = None, run_dir: str | Path = "runs/episode",
                trajectories: str | Path | None = None, progress: Progress | None = None,
                meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """One episode of ``model`` on ``task`` in ``run_dir``; returns the trajectory record."""
    config = config or AgentConfig()
    env = Environment(task, Path(run_dir), config)
    return Agent(model, env, config, progress=progress, trajectories=trajectories, meta=meta).run()


__all__ = ["Agent", "run_episode", "initial_messages", "task_prompt", "EpisodeEnd", "Submitted", "TargetReached", "LimitsExceeded", "FormatError"]
