"""The local transformers backend with tiny causal LMs made here from a config (random weights, a
word-level tokenizer built in the test, our own chat template; nothing is downloaded).

* a random model writes garbage: every turn costs a turn with a clear message;
* a model whose output head is zeroed always emits token 0, which we made a whole
  `<tool_call>` block: the backend parses it, the tool runs, and loop detection ends the episode.
"""

import json

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from cuda_agent.agent import make_backend, run_episode  # noqa: E402

from .agent_support import config, tiny_task, tool_messages  # noqa: E402

CALL = '<tool_call>{"name": "glob", "arguments": {"pattern": "*.md"}}</tool_call>'

TOOLS_TEMPLATE = (
    "{%- if tools %}<|system|>{{ messages[0]['content'] }}\n# Tools\n{% for t in tools %}{{ t | tojson }}\n"
    "{% endfor %}<|end|>\n{%- set msgs = messages[1:] %}{%- else %}{%- set msgs = messages %}{%- endif %}"
    "{%- for m in msgs %}"
    "{%- if m['role'] == 'assistant' %}<|assistant|>{{ m['content'] or '' }}"
    "{%- if m.tool_calls is defined and m.tool_calls %}{%- for c in m.tool_calls %}<tool_call>{\"name\": "
    "\"{{ c['function']['name'] }}\", \"arguments\": {{ c['function']['arguments'] | tojson }}}</tool_call>"
    "{%- endfor %}{%- endif %}<|end|>\n"
    "{%- elif m['role'] == 'tool' %}<|tool|>{{ m['content'] }}<|end|>\n"
    "{%- else %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|assistant|>{%- endif %}")

PLAIN_TEMPLATE = ("{%- for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{%- endfor %}"
                  "{%- if add_generation_prompt %}<|assistant|>{%- endif %}")


def make_model(path, with_call_token: bool, zero_head: bool, template: str):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<unk>", "<eos>", "<pad>", "kernel", "cuda", "the", "fast", "float", "void", "thread", "block"]
    words += [chr(c) for c in range(33, 127)]
    vocab = {CALL: 0} if with_call_token else {}
    for w in words:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>")
    if with_call_token:
        fast.add_tokens([CALL])
    fast.chat_template = template
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=65536,
                      eos_token_id=vocab["<eos>"], pad_token_id=vocab["<pad>"], bos_token_id=None)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        if zero_head:
            model.lm_head.weight.zero_()  # every logit 0: greedy decoding picks token 0
        else:
            model.lm_head.weight[vocab["<eos>"]] = -10.0  # garbage, but never a silent empty reply
    model.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_lms")
    return {"garbage": make_model(root / "garbage", False, False, PLAIN_TEMPLATE),
            "caller": make_model(root / "caller", True, True, TOOLS_TEMPLATE)}


def test_garbage_output_costs_turns_with_clear_messages(tmp_path, models):
    model = make_backend("local", model=models["garbage"], device="cpu", temperature=0.0, max_new_tokens=12)
    assert not model.native  # the plain template has no tools: the text convention is used
    rec = run_episode(tiny_task(tmp_path), model, config(tmp_path, max_turns=4), run_dir=tmp_path / "run")
    assert rec["ended_by"] == "max_turns" and rec["turns"] == 4
    replies = [m for m in rec["messages"] if m["role"] == "assistant"]
    assert len(replies) == 4 and all(r["content"].strip() and "tool_calls" not in r for r in replies)
    feedback = [m for m in rec["messages"][2:] if m["role"] == "user"]
    assert len(feedback) == 4
    assert all("No tool call found" in m["content"] or "cut off at the token limit" in m["content"] for m in feedback)
    assert all(s["prompt_tokens"] > 100 and s["completion_tokens"] == 12 for s in rec["steps"])
    # the prompt the model saw described the tools in text
    assert "<tool_call>" in model.prompt(rec["messages"][:2], rec["tools"])


def test_generated_tool_calls_are_parsed_and_run(tmp_path, models):
    model = make_backend("local", model=models["caller"], device="cpu", temperature=0.0, max_new_tokens=2)
    assert model.native
    prompt = model.prompt([{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}],
                          [{"type": "function", "function": {"name": "glob"}}])
    assert json.dumps({"type": "function", "function": {"name": "glob"}}) in prompt
    rec = run_episode(tiny_task(tmp_path), model, config(tmp_path), run_dir=tmp_path / "run")
    first = rec["messages"][2]
    assert [c["function"] for c in first["tool_calls"]] == [{"name": "glob", "arguments": {"pattern": "*.md"}}] * 2
    results = [m["content"] for m in tool_messages(rec)]
    assert results[0].startswith("SKILL.md")
    assert results[3].startswith("refused")
    assert rec["ended_by"] == "loop" and rec["turns"] == 3
