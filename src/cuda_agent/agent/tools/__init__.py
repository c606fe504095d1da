"""Tools the agent calls, as OpenAI function-calling schemas.

A tool is a class with ``name``, ``description``, ``parameters`` (a JSON schema object) and
``run(args, env) -> ToolResult``. Adding one is one file plus one :data:`TOOLS` entry
("module:Class", imported when first used). Arguments are validated against ``parameters``
before ``run`` sees them, so a tool reads ``args[...]`` without checking types.

Tool failures the model caused (a bad path, a missing string) are results with ``ok=False``
and a message that says what to do; they never raise.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..environment import Environment

TOOLS: dict[str, str] = {
    "bash": "cuda_agent.agent.tools.bash:Bash",
    "read_file": "cuda_agent.agent.tools.files:ReadFile",
    "write_file": "cuda_agent.agent.tools.files:WriteFile",
    "edit_file": "cuda_agent.agent.tools.files:EditFile",
    "glob": "cuda_agent.agent.tools.files:Glob",
    "grep": "cuda_agent.agent.tools.files:Grep",
    "compile": "cuda_agent.agent.tools.kernel:Compile",
    "verify": "cuda_agent.agent.tools.kernel:Verify",
    "profile": "cuda_agent.agent.tools.kernel:Profile",
    "submit": "cuda_agent.agent.tools.submit:Submit",
}


@dataclass
class ToolResult:
    output: str
    ok: bool = True
    sandbox_s: float = 0.0
    """Seconds spent inside the sandbox (build, evaluate, profile) during this call."""
    verdict: dict[str, Any] | None = None
    """The full Verdict dict, when the call ran the sandbox's evaluate."""
    info: dict[str, Any] = field(default_factory=dict)
    """Small machine-readable facts for the trajectory (e.g. build cached)."""
    submitted: bool = False


class Tool:
    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]

    def run(self, args: dict[str, Any], env: "Environment") -> ToolResult:
        raise NotImplementedError

    @classmethod
    def schema(cls) -> dict[str, Any]:
        return {"type": "function", "function": {"name": cls.name, "description": cls.description,
                                                 "parameters": cls.parameters}}


def load_tool(name: str) -> Tool:
    if name not in TOOLS:
        raise KeyError(f"unknown tool {name!r}; known: {', '.join(TOOLS)}")
    module, cls = TOOLS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


def obj(properties: dict[str, dict], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON-schema object for ``parameters`` (no ``required`` key when nothing is: the form
    transformers' ``get_json_schema`` gives, so TRL's rendering of our tools matches ours)."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "object": dict, "array": list}


def validate_args(args: Any, schema: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Check (and gently coerce: "5" -> 5, "true" -> True) arguments against a schema object.
    Returns (arguments, error message or None)."""
    if not isinstance(args, dict):
        return {}, f"arguments must be a JSON object, got {type(args).__name__}"
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in args]
    if missing:
        return args, f"missing required argument(s): {', '.join(missing)}"
    unknown = [k for k in args if k not in props]
    if unknown:
        return args, f"unknown argument(s): {', '.join(unknown)}; this tool takes: {', '.join(props) or 'nothing'}"
    out = {}
    for key, value in args.items():
        want = props[key].get("type")
        if want == "integer" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        elif want == "number" and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        elif want == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        elif want == "integer" and isinstance(value, float) and value.is_integer():
            value = int(value)
        py = _TYPES.get(want)
        if py is not None and (not isinstance(value, py) or (want in ("integer", "number") and isinstance(value, bool))):
            return args, f"argument {key!r} must be a {want}, got {type(value).__name__}"
        out[key] = value
    return out, None


def truncate(text: str, limit: int) -> str:
    """Keep the head and the tail of a long text, saying how much was cut."""
    if len(text) <= limit:
        return text
    head = int(limit * 0.6)
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"


__all__ = ["TOOLS", "Tool", "ToolResult", "load_tool", "obj", "validate_args", "truncate"]
