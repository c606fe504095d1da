"""A transformers causal LM in this process: the default when no endpoint is configured.

The prompt is the tokenizer's chat template applied with ``tools=`` (Qwen, Hermes, Llama 3.1 and
most current templates render tool schemas, assistant ``tool_calls`` and ``role: tool``
messages). A template that does not mention tools gets the text convention instead
(``toolcall_text.to_text_messages``). Replies are parsed by ``toolcall_text.parse_reply``: the
tokenizer's response template where it has one (as TRL parses), else our text convention.

Needs ``transformers`` (the ``agent-local`` extra); imported only when this backend is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import BackendError, ModelReply
from .toolcall_text import add_response_template, parse_reply, to_text_messages


@dataclass
class TransformersConfig:
    model: str = "Qwen/Qwen2.5-Coder-7B-Instruct"
    """Hugging Face model name or local directory (weights and tokenizer)."""
    device: str = "auto"
    """'auto' (CUDA when available, else CPU), 'cpu', 'cuda', 'cuda:1' ..."""
    dtype: str = "auto"
    """'auto', 'bfloat16', 'float16' or 'float32'."""
    max_new_tokens: int = 4096
    temperature: float = 0.7
    """0 means greedy decoding."""
    top_p: float = 0.95
    chat_template: str | None = None
    """A Jinja chat template (text, or a path to a file) replacing the tokenizer's own."""
    context_tokens: int | None = None
    """Context window; None reads max_position_embeddings from the model config."""
    trust_remote_code: bool = False
    local_files_only: bool = False


class TransformersBackend:
    Config = TransformersConfig

    def __init__(self, config: TransformersConfig):
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:  # pragma: no cover - depends on the install
            raise BackendError("the local backend needs transformers: pip install 'cuda-agent[agent-local]' "
                               f"({e})") from None
        self.config = config
        self.name = config.model
        self._torch = torch
        kw = {"trust_remote_code": config.trust_remote_code, "local_files_only": config.local_files_only}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(config.model, **kw)
            dtype = config.dtype if config.dtype == "auto" else getattr(torch, config.dtype)
            import transformers
            dtype_kw = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
            self.model = AutoModelForCausalLM.from_pretrained(config.model, **{dtype_kw: dtype}, **kw)
        except (OSError, ValueError) as e:
            raise BackendError(f"cannot load {config.model}: {e}") from None
        device = config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.model.to(self.device).eval()
        if config.chat_template:
            path = Path(config.chat_template)
            self.tokenizer.chat_template = path.read_text() if path.is_file() else config.chat_template
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"{config.model}: the tokenizer has no chat template; pass chat_template")
        self.native = "tools" in self.tokenizer.chat_template
        add_response_template(self.tokenizer)
        window = getattr(self.model.config, "max_position_embeddings", None)
        self.context_tokens = config.context_tokens or window

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        if self.native:
            return self.tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True,
                                                      tokenize=False)
        return self.tokenizer.apply_chat_template(to_text_messages(messages, tools), add_generation_prompt=True,
                                                  tokenize=False)

    def query(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        torch, c = self._torch, self.config
        text = self.prompt(messages, tools)
        enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(self.device)
        n_prompt = int(enc["input_ids"].shape[1])
        gen: dict[str, Any] = {"max_new_tokens": c.max_new_tokens, "do_sample": c.temperature > 0}
        if c.temperature > 0:
            gen.update(temperature=c.temperature, top_p=c.top_p)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        with torch.no_grad():
            out = self.model.generate(**enc, pad_token_id=pad, **gen)
        new = out[0, n_prompt:]
        reply = parse_reply(self.tokenizer.decode(new, skip_special_tokens=True), self.tokenizer, ids=new.tolist(),
                            prefix=enc["input_ids"][0].tolist(), tools=tools if self.native else None)
        reply.prompt_tokens, reply.completion_tokens = n_prompt, int(len(new))
        reply.finish_reason = "length" if len(new) >= c.max_new_tokens else "stop"
        return reply
