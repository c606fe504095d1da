"""Optional LLM composer: ask an OpenAI-compatible endpoint for a natural fusion.

The composer samples op names from the catalog (same family weights as the rule-based
composer) and asks a chat model for a KernelBench-format module that uses them in a
natural way. Its answer is just another draft: it goes through the same rubric,
decontamination and de-duplication as every other task, so a bad answer costs one
rejected attempt and nothing else.

One ``POST {url}/chat/completions`` per draft, with a timeout and no retries; ``httpx``
when installed, else ``urllib``. No ``openai`` package. This module is tested only
against a local fake HTTP server on 127.0.0.1 that answers a bounded number of requests
(``tests/test_synth_llm.py``); it has not been run against a real model here.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from .catalog import Catalog
from .composer import Composer, Draft

PROMPT = """Write a PyTorch module in KernelBench format that naturally fuses these operators, \
in this order: {ops}.

Rules:
- define `class Model(nn.Module)` with `__init__` taking only sizes/hyper-parameters, and `forward`;
- define module-level size constants (batch_size, in_channels, ...), keep tensors small \
(at most 32768 elements per input);
- define `get_inputs()` returning a list of CPU tensors and `get_init_inputs()` returning a list;
- no randomness in forward (no dropout, no torch.rand*), no .cuda(), no prints;
- reply with one ```python code block and nothing else.

Example of the format:
```python
{example}```
"""

EXAMPLE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.relu(x)
        return x


batch_size = 16
in_features = 64
out_features = 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

CODE_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(text: str) -> str:
    """The first fenced code block of a reply, or the whole reply."""
    m = CODE_BLOCK.search(text)
    return (m.group(1) if m else text).strip() + "\n"


class LLMComposer:
    """Drafts from a chat model (see module docstring)."""

    def __init__(self, url: str, model: str, catalog: Catalog, timeout: float = 120.0,
                 max_tokens: int = 2048):
        self.url = url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self._sampler = Composer(catalog)

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        endpoint = f"{self.url}/chat/completions"
        try:
            import httpx
        except ImportError:
            httpx = None
        if httpx is not None:
            r = httpx.post(endpoint, json=payload, timeout=self.timeout)
            r.raise_for_status()
            return r.json()
        import urllib.request

        req = urllib.request.Request(endpoint, data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - user-given URL
            return json.loads(resp.read().decode())

    def sample_ops(self, rng: random.Random, n_ops: int) -> list[str]:
        names: list[str] = []
        while len(names) < n_ops:
            op = self._sampler._pick(rng, lambda o: not (o.terminal and len(names) < n_ops - 1),
                                     first=not names)
            if op is None:
                break
            names.append(op.name)
        return names

    def compose(self, rng: random.Random, n_ops: int) -> Draft | None:
        """One request; None when the reply has no usable module."""
        from cuda_agent.tasks import TaskError, check_task_source

        ops = self.sample_ops(rng, n_ops)
        payload = {
            "model": self.model,
            "messages": [{"role": "user", "content": PROMPT.format(ops=", ".join(ops), example=EXAMPLE)}],
            "temperature": 0.7,
            "max_tokens": self.max_tokens,
            "seed": rng.randrange(1 << 31),
        }
        try:
            reply = self._post(payload)
            text = reply["choices"][0]["message"]["content"]
        except Exception:  # noqa: BLE001 - network or format trouble: a rejected attempt
            return None
        code = extract_code(text)
        try:
            check_task_source(code, "<llm reply>")
        except TaskError:
            return None
        inputs, output, constants = _meta_shapes(code)
        return Draft(code, ops, constants, inputs, output, [])


def _meta_shapes(code: str):
    """Input/output shapes and int constants of a module, on meta tensors ([] if it fails)."""
    import sys
    import warnings

    import torch

    from cuda_agent.tasks import Task

    from .gpu import module_constants

    try:
        constants = {k: v for k, (v, _) in module_constants(code).items()}
    except SyntaxError:
        return [], (), {}
    try:
        module = Task("llm", code).load_module()
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")
            model = module.Model(*module.get_init_inputs())
            inputs = module.get_inputs()
            out = model(*inputs)
        sys.modules.pop(module.__name__, None)
        out = out[0] if isinstance(out, (tuple, list)) else out
        return [tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)], tuple(out.shape), constants
    except Exception:  # noqa: BLE001 - the rubric will report what is wrong
        return [], (), constants
