"""TRL's driver of the agent's episode engine: the environment class of ``GRPOTrainer(environment_factory=...)``.

TRL generates, parses each reply with the tokenizer's response template (the parse our
``parse_reply`` does), calls the environment's method of each tool call by name, and counts turns
and tokens itself. :class:`CudaAgentEnv` is written out, one method per training tool
(:data:`~cuda_agent.train.agent_env.TRAINING_TOOLS`), each one
:meth:`cuda_agent.agent.Episode.call` into the agent's own engine: the same tools, rules, rendered
results and reward as every other driver, with verify through the evaluation service.
"""

from __future__ import annotations

from typing import Any


def _documented(fn):
    """Give a tool method the Google docstring of the agent tool it calls (TRL renders the schema
    from the signature and this docstring; ``test_trl_renders_our_tools_exactly_as_the_agent_presents_them``
    checks that the result equals the agent's own schema)."""
    from ..agent.tools import load_tool

    tool = load_tool(fn.__name__)
    args = [f"    {k}: {' '.join(str(p.get('description') or k).split())}" for k, p in tool.parameters["properties"].items()]
    fn.__doc__ = " ".join(tool.description.split()) + ("\n\nArgs:\n" + "\n".join(args) if args else "")
    return fn


class CudaAgentEnv:
    """TRL's environment: one method per training tool, each one call into the agent's Episode
    (:meth:`cuda_agent.agent.Episode.call`: the same tools, rules, rendering and reward as every
    other driver). ``start(row) -> Episode`` begins an episode from a dataset row. An optional
    argument defaults to None, not ``X | None``: TRL would render that as "nullable", which the
    agent's schema (what the RFT data shows) does not have."""

    def __init__(self, start=None):
        self._start, self.episode, self.final_reward, self.scored = start, None, None, False

    def reset(self, **row: Any) -> None:
        self.episode, self.final_reward, self.scored = self._start(row), None, False
        return None  # the prompt row already holds the agent's task message

    def get_reward(self) -> float | None:
        """The episode's reward; None after a harness_error (TRL then leaves the rollout out: an
        unscorable sample gets no advantage, see tests/test_train_harness_error.py)."""
        if not self.scored:
            self.final_reward = self.episode.reward if self.episode is not None else -1.0
            self.scored = True
        return self.final_reward

    def _call(self, name: str, **arguments: Any) -> str:
        return self.episode.call(name, {k: v for k, v in arguments.items() if v is not None})

    @_documented
    def bash(self, command: str, timeout: int = None):
        return self._call("bash", command=command, timeout=timeout)

    @_documented
    def compile(self):
        return self._call("compile")

    @_documented
    def edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool = None):
        return self._call("edit_file", path=path, old_string=old_string, new_string=new_string, replace_all=replace_all)

    @_documented
    def glob(self, pattern: str = None):
        return self._call("glob", pattern=pattern)

    @_documented
    def grep(self, pattern: str, path: str = None, glob: str = None, ignore_case: bool = None):
        return self._call("grep", pattern=pattern, path=path, glob=glob, ignore_case=ignore_case)

    @_documented
    def read_file(self, path: str, offset: int = None, limit: int = None):
        return self._call("read_file", path=path, offset=offset, limit=limit)

    @_documented
    def submit(self, summary: str = None):
        return self._call("submit", summary=summary)

    @_documented
    def verify(self):
        return self._call("verify")

    @_documented
    def write_file(self, path: str, content: str):
        return self._call("write_file", path=path, content=content)
