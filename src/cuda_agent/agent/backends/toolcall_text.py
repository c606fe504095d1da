"""The one tool-call parser (:func:`parse_reply`), and tool calls written as text.

:func:`parse_reply` reads a reply with the tokenizer's response template where there is one (as
TRL does), else with our text convention, taught in ``templates/text_tools.md`` (Hermes / Qwen)::

    <tool_call>
    {"name": "write_file", "arguments": {"path": "kernels/a.cu", "content": "..."}}
    </tool_call>

The text parser also reads ``"parameters"`` for ``"arguments"``, Llama 3.x's bare JSON call,
arguments given as a JSON *string*, a last ``<tool_call>`` left unclosed, and the Qwen3-Coder XML
form ``<tool_call><function=bash><parameter=command>ls</parameter></function></tool_call>``. JSON
is read with ``strict=False`` (models often put raw newlines inside strings).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from . import ModelReply, ToolCall

BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
XML_FUNC = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|\Z)", re.S)
XML_PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|\Z)", re.S)


def new_call_id() -> str:
    return f"call_{secrets.token_hex(6)}"


def _loads(text: str) -> Any:
    return json.loads(text, strict=False)


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments as produced (object or JSON text) -> (dict, None) or (None, error)."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = _loads(raw)
    except json.JSONDecodeError as e:
        return None, f"arguments are not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
    if isinstance(value, str):  # double-encoded
        try:
            value = _loads(value)
        except json.JSONDecodeError:
            pass
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def make_call(name: str, raw: Any, call_id: str | None = None) -> ToolCall:
    """A ToolCall from a name and its arguments as produced (object or JSON text)."""
    args, error = parse_arguments(raw)
    return ToolCall(call_id or new_call_id(), name or "", args,
                    raw_arguments=raw if isinstance(raw, str) else json.dumps(raw), error=error)


def _parse_json_block(body: str) -> ToolCall:
    text = body.strip()
    if text.startswith("```"):
        text = re.sub(r"^```\w*\s*|\s*```$", "", text)
    try:
        obj = _loads(text)
    except json.JSONDecodeError as e:
        name = re.search(r'"name"\s*:\s*"([^"]+)"', text)
        return ToolCall(new_call_id(), name.group(1) if name else "", None, raw_arguments=text,
                        error=f"the <tool_call> block is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCall(new_call_id(), "", None, raw_arguments=text,
                        error='a <tool_call> block must hold {"name": "...", "arguments": {...}}')
    return make_call(obj["name"], obj.get("arguments", obj.get("parameters", {})))


def _parse_xml_block(body: str) -> ToolCall:
    m = XML_FUNC.search(body)
    name, inner = m.group(1).strip(), m.group(2)
    args: dict[str, Any] = {}
    for key, value in XML_PARAM.findall(inner):
        try:  # numbers, booleans and objects come through as JSON; text stays text
            parsed = _loads(value)
            args[key] = parsed if not isinstance(parsed, str) else value
        except json.JSONDecodeError:
            args[key] = value
    return ToolCall(new_call_id(), name, args, raw_arguments=json.dumps(args))


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[str]]:
    """(text without the tool-call blocks, parsed calls, error messages for calls that failed)."""
    bare = _bare_json_call(text or "")
    if bare is not None:  # Llama 3.x: the whole reply is one {"name": ..., "parameters": {...}}
        return "", [bare], []
    calls: list[ToolCall] = []
    errors: list[str] = []
    for m in BLOCK.finditer(text or ""):
        body = m.group(1)
        if not body.strip():
            continue
        call = _parse_xml_block(body) if XML_FUNC.search(body) else _parse_json_block(body)
        if call.error and not call.name:
            errors.append(call.error)
            continue
        calls.append(call)
    if not calls and not errors:  # bare Qwen3-Coder function blocks, without <tool_call>
        for m in XML_FUNC.finditer(text or ""):
            calls.append(_parse_xml_block(m.group(0)))
    rest = BLOCK.sub("", text or "")
    if calls:
        rest = XML_FUNC.sub("", rest)
    return rest.strip(), calls, errors


def _bare_json_call(text: str) -> ToolCall | None:
    body = text.strip().removeprefix("<|python_tag|>").strip()
    if not (body.startswith("{") and body.endswith("}") and '"name"' in body):
        return None
    try:
        obj = _loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not ({"arguments", "parameters"} & set(obj)):
        return None
    return _parse_json_block(body)


THINK = re.compile(r"^\s*(?:<think>)?(.*?)</think>\s*", re.S)


def parse_reply(text: str, tokenizer: Any = None, ids: list[int] | None = None, prefix: Any = None,
                tools: list[dict[str, Any]] | None = None) -> ModelReply:
    """The one tool-call parser: a reply's text (and token ids) -> content, reasoning and calls.

    Where the tokenizer has a response template (the model's own, or the one TRL sets for known
    chat templates: :func:`add_response_template`), transformers' ``parse_response`` reads it,
    exactly as TRL's rollouts do; ``prefix`` is the prompt (text or ids) it continues. Otherwise,
    or when that parse fails, our text convention: ``<tool_call>`` JSON blocks, the Qwen3-Coder
    XML form, Llama 3.x's bare ``{"name", "parameters"}``, and a ``<think>`` block as reasoning.
    """
    if tokenizer is not None and getattr(tokenizer, "response_template", None) is not None:
        try:
            msg = tokenizer.parse_response(ids if ids is not None else text, prefix=prefix if prefix is not None else "",
                                           tools=tools)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):  # unreadable output: our parser says why
            msg = None
        if isinstance(msg, dict):
            calls = [make_call((c.get("function") or c).get("name"), (c.get("function") or c).get("arguments"))
                     for c in msg.get("tool_calls") or []]
            content = (msg.get("content") or "").strip()
            if calls or "<tool_call>" not in content:
                return ModelReply(content=content, tool_calls=calls, reasoning=msg.get("reasoning_content") or None)
    reasoning = None
    think = THINK.match(text or "") if "</think>" in (text or "") else None
    if think:
        reasoning, text = think.group(1).strip() or None, text[think.end():]
    content, calls, errors = parse_tool_calls(text)
    return ModelReply(content=content, tool_calls=calls, parse_errors=errors, reasoning=reasoning)


def add_response_template(tokenizer: Any) -> Any:
    """Give ``tokenizer`` the response template TRL uses for its chat template, when it has none
    and TRL knows the template (what TRL's trainers do before their rollouts), so every driver
    parses as TRL does. Without TRL, or for an unknown template, the tokenizer is left as it is."""
    if getattr(tokenizer, "response_template", None) is None:
        try:
            from trl.chat_template_utils import add_response_schema
        except ImportError:
            return tokenizer
        try:
            add_response_schema(tokenizer)
        except ValueError:  # a template TRL does not know: our text parser reads it
            pass
    return tokenizer


def render_tool_call(call: dict[str, Any]) -> str:
    """One OpenAI ``tool_calls`` entry as a text block of our convention."""
    fn = call.get("function", {})
    args = fn.get("arguments", {})
    if isinstance(args, str):
        parsed, error = parse_arguments(args)
        args = parsed if error is None else args
    return "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False) + \
        "\n</tool_call>"


def to_text_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rewrite a conversation for a model without native tools: the tool schemas and the calling
    convention go into the system prompt, assistant tool calls become text blocks, and tool
    results become user messages holding <tool_response> blocks."""
    from ..templating import render

    out: list[dict[str, Any]] = []
    instructions = render("text_tools.md", tool_schemas="\n".join(json.dumps(t, ensure_ascii=False) for t in tools))
    for msg in messages:
        role = msg["role"]
        if role == "system":
            out.append({"role": "system", "content": (msg.get("content") or "") + instructions})
        elif role == "assistant":
            parts = [msg.get("content") or ""] + [render_tool_call(c) for c in msg.get("tool_calls") or []]
            out.append({"role": "assistant", "content": "\n".join(p for p in parts if p)})
        elif role == "tool":
            block = f"<tool_response name=\"{msg.get('name', '')}\">\n{msg.get('content', '')}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
        else:
            out.append({"role": role, "content": msg.get("content") or ""})
    if not out or out[0]["role"] != "system":
        out.insert(0, {"role": "system", "content": instructions.strip()})
    for m in out:
        m.pop("_tool_results", None)
    return out
