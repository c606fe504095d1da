"""The one tool-call parser on real chat templates: the same call out of every path.

tests/data/tokenizers holds tiny byte-level tokenizers with real chat templates: Qwen3 (TRL's copy
of the Hub template, with the response template a model repo ships in tokenizer_config.json),
Llama 3.1 (TRL's copy; its response template is the one TRL sets for that template) and a
Hermes-style template written for these tests (no response template: our text parser reads it).
A reply is what the template renders for an assistant tool call; each path must read the same
call from it: ``parse_reply`` with the tokenizer (its response template, as our local and verl
drivers call it), ``parse_reply`` on the text alone (the fallback), TRL's ``parse_response`` (its
rollouts), the replay backend and the OpenAI backend on a server without a tool parser.
"""

import pytest

from cuda_agent.agent.backends.toolcall_text import add_response_template, parse_reply

from .conftest import ROOT

transformers = pytest.importorskip("transformers")

TOKENIZERS = ROOT / "tests" / "data" / "tokenizers"
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "path"},
                                                    "limit": {"type": "integer", "description": "lines"}},
                   "required": ["path"]}}}]
CALL = {"path": "kernels/swish.cu", "limit": 40}
MESSAGES = [{"role": "system", "content": "You write CUDA kernels."}, {"role": "user", "content": "Read the kernel."}]
CASES = {  # name: (tokenizer dir, chat template arguments, assistant content, reasoning)
    "qwen3-no-thinking": ("qwen3", {"enable_thinking": False}, "Let me look.", None),
    "qwen3-thinking": ("qwen3", {"enable_thinking": True}, "Let me look.", "The kernel decides the speed."),
    "hermes": ("hermes", {}, "Let me look.", None),
    "llama3.1": ("llama3_1", {}, "", None),  # Llama 3.1 writes a bare call, no text beside it
}


def _tokenizer(name):
    from transformers import AutoTokenizer

    return add_response_template(AutoTokenizer.from_pretrained(TOKENIZERS / name))


def _reply(case):
    """(tokenizer, prompt ids, reply text, reply ids) as the template renders the assistant's call."""
    name, kw, content, reasoning = CASES[case]
    tok = _tokenizer(name)
    assistant = {"role": "assistant", "content": content,
                 "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": CALL}}]}
    if reasoning:
        assistant["reasoning_content"] = reasoning
    prompt = tok.apply_chat_template(MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True, **kw)
    full = tok.apply_chat_template(MESSAGES + [assistant], tools=TOOLS, tokenize=False, **kw)
    assert full.startswith(prompt)
    text = full[len(prompt):]
    return tok, tok.encode(prompt, add_special_tokens=False), text, tok.encode(text, add_special_tokens=False)


def _calls(reply):
    return [(c.name, c.arguments) for c in reply.tool_calls]


@pytest.mark.parametrize("case", CASES)
def test_every_path_reads_the_same_call(case):
    from cuda_agent.agent.backends.openai_compat import OpenAIBackend, OpenAIConfig
    from cuda_agent.agent.backends.replay import ReplayBackend, ReplayConfig

    pytest.importorskip("httpx")  # the OpenAI backend's client
    tok, prompt_ids, text, ids = _reply(case)
    visible = tok.decode(ids, skip_special_tokens=True)  # what a driver decodes (end-of-turn tokens dropped)
    expected = [("read_file", CALL)]
    content, reasoning = CASES[case][2], CASES[case][3]

    with_template = parse_reply(visible, tok, ids=ids, prefix=prompt_ids, tools=TOOLS)
    text_only = parse_reply(visible)
    replayed = ReplayBackend(ReplayConfig(steps=[visible])).query([], TOOLS)
    served = OpenAIBackend(OpenAIConfig()).parse({"choices": [{"message": {"content": visible}}]})
    for reply in (with_template, text_only, replayed, served):
        assert _calls(reply) == expected and reply.parse_errors == []
        assert reply.content == content and reply.reasoning == reasoning

    if getattr(tok, "response_template", None) is not None:
        trl = pytest.importorskip("trl.chat_template_utils")
        parsed = trl.parse_response(tok, ids, prefix=prompt_ids, tools=TOOLS)
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed["tool_calls"]] == expected
        assert parsed["content"] == content and parsed.get("reasoning_content") == reasoning


def test_which_templates_bring_a_response_template():
    assert _tokenizer("qwen3").response_template is not None  # shipped in its tokenizer_config.json
    assert getattr(_tokenizer("hermes"), "response_template", None) is None  # unknown to TRL: our text parser
    if pytest.importorskip("trl"):
        assert _tokenizer("llama3_1").response_template is not None  # TRL's, for the Llama 3.1 template


@pytest.mark.parametrize("case", ["qwen3-no-thinking", "hermes"])
def test_a_broken_call_is_a_message_on_every_path(case):
    tok, prompt_ids, _, _ = _reply(case)
    text = 'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.cu",}\n</tool_call>'
    ids = tok.encode(text, add_special_tokens=False)
    for reply in (parse_reply(text, tok, ids=ids, prefix=prompt_ids, tools=TOOLS), parse_reply(text)):
        assert reply.tool_calls == [] or reply.tool_calls[0].error
        assert reply.parse_errors or reply.tool_calls[0].error
