"""A tiny random-init causal LM and a locally trained tokenizer, for tests and smoke runs.

No download: the tokenizer is a byte-level BPE trained here with the ``tokenizers`` library on
whatever text the caller hands in (task sources, prompts, solutions), wrapped as a
``PreTrainedTokenizerFast`` with the Qwen2.5 chat template that TRL ships (hermes tool calls:
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, the format TRL's response parser,
verl's ``hermes`` tool parser and vLLM's ``hermes`` parser all read). The model is a
2-layer Qwen2 with a few hundred thousand parameters, saved with ``save_pretrained`` so every
stage loads it by path exactly as it would load a real model.

    path = make_tiny_model(tmp / "tiny", corpus=[...])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Special tokens (dropped by ``decode(skip_special_tokens=True)``); EOS is ``<|im_end|>``."""
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<tools>", "</tools>"]
"""Added but not special: decoding keeps them, so tool calls survive ``skip_special_tokens``."""

_BASE_CORPUS = [
    "You are a helpful assistant. Write CUDA kernels. model_new.py kernels/ ModelNew forward",
    '{"name": "write_file", "arguments": {"path": "model_new.py", "content": "import torch"}}',
    "#include <cuda_runtime.h>\n__global__ void kernel(const float* x, float* y, int n) {}\n",
    "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n",
]


@dataclass
class TinyModelConfig:
    """Shape of the tiny model. Defaults fit a CPU smoke run in seconds."""

    vocab_size: int = 2048
    """Target BPE vocabulary (smaller when the corpus is small)."""
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 128
    max_position_embeddings: int = 16384
    seed: int = 0


def chat_template() -> str:
    """The Qwen2.5 chat template as shipped in TRL (needs trl); TRL knows its tool-call parser
    and its training variant with ``{% generation %}`` markers (assistant-only loss)."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def make_tokenizer(corpus: Iterable[str], vocab_size: int = 2048):
    """Train a byte-level BPE on ``corpus`` and wrap it for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    texts = list(_BASE_CORPUS) + [str(t) for t in corpus]
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None,
                                   additional_special_tokens=["<|im_start|>"])
    fast.add_tokens(TAG_TOKENS)
    fast.chat_template = chat_template()
    fast.padding_side = "left"  # TRL's GRPOTrainer generates with left padding
    fast.model_max_length = 1 << 20
    return fast


def make_tiny_model(out: str | Path, corpus: Iterable[str] = (), config: TinyModelConfig | None = None) -> Path:
    """Write a tokenizer and a random-init Qwen2 causal LM to ``out``; return ``out``."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    cfg = config or TinyModelConfig()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(corpus, cfg.vocab_size)
    tokenizer.save_pretrained(out)
    torch.manual_seed(cfg.seed)
    model_cfg = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
        intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None)
    model = Qwen2ForCausalLM(model_cfg)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model.save_pretrained(out)
    return out
